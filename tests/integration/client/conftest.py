"""The client tests' shared fixtures: one live gunicorn server per test module, the
"billing" tenant (`owner`) and a Python client holding its admin token (`client`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.client_support import Tenant, live_server, make_tenant
from tests.support.procs import WebServer

from scheduler_client import Client  # isort: skip  (put on sys.path by client_support)


@pytest.fixture(scope="module")
def server(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    """A module-scoped live server (test_client_retries overrides it with a low throttle)."""
    with django_db_blocker.unblock(), live_server(tmp_path_factory.mktemp("web")) as web:
        yield web


@pytest.fixture
def owner(db: Any) -> Tenant:
    """The "billing" tenant with an admin token (the CLI modules and test_client_retries
    override it: they also point the CLI at the server, or heal the database proxy)."""
    return make_tenant("billing")


@pytest.fixture
def client(server: WebServer, owner: Tenant) -> Iterator[Client]:
    """The Python client as the owner's admin, closed when the test ends."""
    with Client(server.url, owner.token) as c:
        yield c
