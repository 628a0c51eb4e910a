"""A beat whose database connection is lost loads its whole stage-ahead window on
the next cycle: the connection after may reach a fail-over's new primary, whose
transaction ids need not follow the old primary's, so the incremental load's
watermark (transaction ids) from before means nothing there."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection

from dispatch import services
from dispatch.models import Execution
from dispatch.scheduler.loop import Beat
from tenants.roles import Principal
from tests.support.database_faults import end_backend

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "reconnect-beat", "cycle_s": 0.2, "lookahead_s": 2}


def test_a_lost_connection_drops_the_load_watermark(beat: Beat, admin_principal: Principal) -> None:
    job, _ = services.job_create(actor=admin_principal, data={"target": TARGET, "name": "r1"})
    deadline = time.monotonic() + 20
    while not Execution.objects.filter(schedule=job, state="queued").exists():
        assert time.monotonic() < deadline
        beat.cycle()
    assert beat._horizon is not None  # loaded incrementally from here on
    end_backend(connection.connection.info.backend_pid)
    beat.cycle()  # the statement fails on the ended connection; the beat reconnects
    assert beat._horizon is None
    # And it goes on firing on its new connection.
    later, _ = services.job_create(actor=admin_principal, data={"target": TARGET, "name": "r2"})
    while not Execution.objects.filter(schedule=later, state="queued").exists():
        assert time.monotonic() < deadline + 20
        beat.cycle()
