"""`manage.py runserver` that reads chunked request bodies (config/chunked.py)."""

from __future__ import annotations

from django.contrib.staticfiles.management.commands.runserver import Command as StaticRunserver

from config.chunked import ChunkedWSGIServer


class Command(StaticRunserver):
    server_cls = ChunkedWSGIServer
