"""`manage.py runserver` that reads chunked request bodies (config/chunked.py).

It wraps whichever runserver the apps listed after `config` provide
(staticfiles', or WhiteNoise's nostatic one), changing only the server class.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.apps import apps

from config.chunked import ChunkedWSGIServer


def _next_runserver() -> Any:
    names = [app.name for app in apps.get_app_configs()]
    below = names[names.index("config") + 1 :] if "config" in names else names
    for name in [*below, "django.core"]:
        try:
            return import_module(f"{name}.management.commands.runserver").Command
        except (ImportError, AttributeError):
            continue
    raise ImportError("no runserver command")  # django.core always has one


class Command(_next_runserver()):  # type: ignore[misc]
    server_cls = ChunkedWSGIServer
