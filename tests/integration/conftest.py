"""Fixtures shared by the integration tests: the console personas' world, the
test's own processes (`start`), and a fault proxy in front of the test database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.support.console_support import World, build_world
from tests.support.faultproxy import FaultProxy, database_target, proxied
from tests.support.procs import Proc, processes
from tests.support.worker_support import purge


@pytest.fixture
def world(db: Any) -> World:
    """The console personas and objects (tests/support/console_support.py); a module
    that needs more in its world overrides this fixture, requesting `world` to extend it."""
    return build_world()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """`start(name, cmd, **env)` for the test's own processes (beats, servers), all
    stopped when it ends. The platform's queues are emptied before and after, so no
    message of an earlier test reaches them: the broker is this test run's own
    (its own Redis database per pytest-xdist worker, tests/support/xdist_slots.py).
    Workers that should be waited for until ready: `start_worker` (worker/conftest.py)."""
    purge(settings.CELERY_BROKER_URL)
    with processes(tmp_path) as start:
        yield start
    purge(settings.CELERY_BROKER_URL)


@pytest.fixture
def db_proxy() -> Iterator[FaultProxy]:
    """A fault-injecting TCP proxy in front of the test database: processes started
    with `DATABASE_URL=db_proxy.database_url(connection.settings_dict)` reach it only
    through the proxy, which the test makes slow, refuse, reset or black-hole."""
    with FaultProxy(database_target(connection.settings_dict)) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def module_db_proxy(django_db_setup: Any, django_db_blocker: Any) -> Iterator[FaultProxy]:
    """`db_proxy` for a whole module: in front of the test database for a server the
    module starts once (its tests cut and heal the link, each leaving it healed)."""
    with django_db_blocker.unblock(), proxied(database_target(connection.settings_dict)) as p:
        yield p
