from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from config import embedded

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.acquire()
application = get_wsgi_application()

from config import telemetry  # noqa: E402 - after Django is set up

telemetry.setup("web")
