"""`python -m tests.chaos [pytest args]`: the chaos suite without make.

DURATION=<seconds> lengthens the workload (and repeats the nemesis cycle) for a soak.
"""

from __future__ import annotations

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["-m", "chaos", "tests/chaos", "-q", "-s", *sys.argv[1:]]))
