"""Shared fixtures of the worker tests: one real Celery worker per module (started
as the module's `worker_settings` say) with one ledger per module it may call,
`start_worker` for tests that start, kill and pause workers of their own, and the
platform's web (`web`) at a URL chosen first (`platform_url`), for modules whose
workers must name it (identity tokens, completion callbacks, live logs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support.ledger import Ledger, Respond
from tests.support.net import free_port
from tests.support.procs import Proc, WebServer, processes
from tests.support.worker_support import purge, worker_processes


@pytest.fixture(scope="module")
def module_ledger(ledger_respond: Respond | None) -> Iterator[Ledger]:
    """One recording receiver for the module: the module's worker is allowed to call it."""
    with Ledger(ledger_respond) as ledger:
        yield ledger


@pytest.fixture
def ledger_allowed(ledger: Ledger, settings: Any) -> None:
    """The test's own ledger (tests/conftest.py) allowed past the SSRF guard, for the
    attempts the test process runs itself (runner.run_execution, no worker process):
    `pytestmark = pytest.mark.usefixtures("ledger_allowed")`."""
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]


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


@pytest.fixture(scope="module")
def platform_url() -> str:
    """The platform's URL as web and worker are told it (PLATFORM_URL)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def web(
    platform_url: str,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebServer]:
    """gunicorn at `platform_url` for the module (one process, four threads)."""
    port = int(platform_url.rsplit(":", 1)[1])
    with django_db_blocker.unblock(), processes(tmp_path_factory.mktemp("web")) as start:
        yield WebServer(
            start, port=port, PLATFORM_URL=platform_url, WEB_WORKERS="1", WEB_THREADS="4"
        )
