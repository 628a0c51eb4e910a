"""The client tests' shared fixture: one live gunicorn server per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.client_support import live_server
from tests.support.procs import WebServer


@pytest.fixture(scope="module")
def server(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    """A module-scoped live server (test_client_retries overrides it with a low throttle)."""
    with django_db_blocker.unblock(), live_server(tmp_path_factory.mktemp("web")) as web:
        yield web
