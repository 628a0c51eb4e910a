"""A row handed back after admission (the worker's rate-limit hold: retry_scheduled,
same attempt) with a due time beyond the window is loaded when it enters the window
(it was written before the watermark moved on) and published again."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Execution
from dispatch.scheduler.loop import Beat
from tenants.roles import Principal
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "handback-beat", "cycle_s": 0.2, "lookahead_s": 2}


def test_a_handed_back_row_is_published_again(beat: Beat, admin_principal: Principal) -> None:
    job, _ = services.job_create(actor=admin_principal, data={"target": TARGET, "name": "h"})
    deadline = time.monotonic() + 20
    while not Execution.objects.filter(schedule=job, state="queued").exists():
        assert time.monotonic() < deadline
        beat.cycle()
    beat.cycle()
    Execution.objects.filter(schedule=job).update(
        state="retry_scheduled", next_attempt_at=db_now() + timedelta(seconds=4)
    )
    while not Execution.objects.filter(schedule=job, state="queued").exists():
        assert time.monotonic() < deadline, (beat._horizon, len(beat.heap))
        beat.cycle()  # loads after the hand-back: the row is not in the window yet
        time.sleep(0.1)
