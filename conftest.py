"""Test session wiring: real PostgreSQL and Redis (embedded ones when no URLs are set)."""

from __future__ import annotations

import os


def pytest_configure() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    # `make test` already started them; a bare `pytest` joins (or starts) the same
    # servers, and stops them at exit if it was the last user.
    embedded.acquire()
