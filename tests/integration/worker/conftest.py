"""Shared fixtures of the worker tests: one real Celery worker per module (started
as the module's `worker_settings` say) with one ledger per module it may call, and
`start_worker` for tests that start, kill and pause workers of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support.ledger import Ledger, Respond
from tests.support.procs import Proc
from tests.support.worker_support import purge, worker_processes


@pytest.fixture(scope="module")
def module_ledger(ledger_respond: Respond | None) -> Iterator[Ledger]:
    """One recording receiver for the module: the module's worker is allowed to call it."""
    with Ledger(ledger_respond) as ledger:
        yield ledger


@pytest.fixture(scope="module")
def worker_settings() -> dict[str, Any]:
    """How the module's worker starts: `start_worker` keywords (`queues`, `concurrency`)
    and environment variables. A module overrides this fixture."""
    return {}


@pytest.fixture(scope="module")
def worker(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    worker_settings: dict[str, Any],
    django_db_setup: Any,
) -> Iterator[Proc]:
    """One worker ("w1") for the module (its tests do not kill it), on an empty broker."""
    purge(settings.CELERY_BROKER_URL)
    log_dir = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    with worker_processes(log_dir) as start:
        yield start("w1", **worker_settings)
    purge(settings.CELERY_BROKER_URL)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """`start_worker(name, queues=..., **env)` for the test's own workers, each waited
    for until ready; all are stopped and the broker emptied when the test ends."""
    purge(settings.CELERY_BROKER_URL)
    with worker_processes(tmp_path) as start:
        yield start
    purge(settings.CELERY_BROKER_URL)
