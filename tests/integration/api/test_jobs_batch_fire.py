"""A batch's jobs fired by a real beat and a real Celery worker (separate processes):
each job called once, with its own body, after one POST /v1/jobs:batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Execution, Schedule
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import ONE_SHOT, beat_and_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
JOBS = 20


@pytest.fixture
def platform(tmp_path: Path, ledger: Ledger) -> Iterator[dict[str, Proc]]:
    with beat_and_worker(tmp_path, ledger, beat_name="batch-beat", worker_name="bw") as procs:
        yield procs


def test_a_batch_of_run_now_jobs_is_fired_once_each(
    api: APIClient, ledger: Ledger, platform: dict[str, Proc], settings: Any
) -> None:
    # The save-time SSRF guard lets this process's jobs name the loopback receiver
    # (the worker has the same allowance from beat_and_worker).
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    target = {"type": "http", "url": f"{ledger.url}/remind", "timeout_s": 10}
    jobs = [
        {"target": target | {"body": {"n": n}}, "idempotency_key": f"fire-{n}", "retry": ONE_SHOT}
        for n in range(JOBS)
    ]
    res = api.post("/v1/jobs:batch", {"jobs": jobs}, format="json")
    assert res.status_code == 200 and res.json()["created"] == JOBS, res.content

    wait_for(
        lambda: Execution.objects.filter(state="succeeded").count() == JOBS,
        timeout=60,
        what=f"{JOBS} succeeded executions",
    )
    bodies = sorted(json.loads(r["body"])["n"] for r in ledger.requests)
    assert bodies == list(range(JOBS)), ledger.dump()  # each job once, none twice
    assert Execution.objects.count() == JOBS
    assert Schedule.objects.filter(next_run_at__isnull=False).count() == 0  # one-offs done
