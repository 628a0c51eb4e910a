"""`python -m scheduler_client.cli` is `schedctl`."""

import sys

from scheduler_client.cli import main

sys.exit(main())
