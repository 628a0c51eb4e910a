from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from config import embedded
from config.chunked import ChunkedBodyMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.acquire()
# Chunked request bodies get a length Django can read (config/chunked.py).
application = ChunkedBodyMiddleware(get_wsgi_application())

from config import telemetry  # noqa: E402 - after Django is set up

telemetry.setup("web")
