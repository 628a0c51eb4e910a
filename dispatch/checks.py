"""Deployment checks of the dispatch app (`manage.py check --deploy`)."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks


def check_platform_url(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """PLATFORM_URL names the platform to everything outside it: the issuer of every
    run's identity token (a verifier compares `iss` with it) and the base of the
    completion callbacks. Left at its development default, production tokens name
    127.0.0.1 and handed-off runs call back to the wrong host, so they never end."""
    url = str(getattr(settings, "PLATFORM_URL", ""))
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "https" or not host or loopback:
        return [
            checks.Warning(
                f"PLATFORM_URL is {url!r}: set it to the web's public https URL "
                "(identity tokens name it as their issuer; completion callbacks are sent to it)",
                id="dispatch.W001",
            )
        ]
    return []
