"""Priorities between queues on a busy worker, with a real worker and receiver:
high-priority messages queued beside low ones are all run first, on Redis (the
default broker) and on RabbitMQ (RABBITMQ_URL; skipped when unset)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from dispatch.models import Execution, Schedule
from dispatch.scheduler.beat import Beat, BeatConfig, Pending
from tenants.roles import Principal
from tests.support.procs import Ledger, processes, wait_for, worker_cmd
from tests.support.worker_support import make_execution, make_schedule, purge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "")
EACH = 6


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest, settings: Any) -> Any:
    if request.param == "rabbitmq":
        if not RABBITMQ_URL:
            pytest.skip("RABBITMQ_URL not set")
        # The beat's publish path reads the broker from settings.
        settings.CELERY_BROKER_URL = RABBITMQ_URL
    url = str(django_settings.CELERY_BROKER_URL)
    purge(url)
    yield url
    purge(url)


def test_a_busy_worker_drains_high_priority_before_low(
    tmp_path: Path, broker: str, admin_principal: Principal
) -> None:
    ledger = Ledger()
    try:
        target = {"type": "http", "url": f"{ledger.url}/hook"}
        high = make_schedule(admin_principal, target, name="urgent")
        low = make_schedule(admin_principal, target, name="batch")
        Schedule.objects.filter(pk=high.pk).update(priority="high")
        Schedule.objects.filter(pk=low.pk).update(priority="low")
        rows: list[tuple[Execution, str]] = []
        for _ in range(EACH):
            # Low first in each pair: arrival order alone would run L H L H…
            rows.append((make_execution(low), "low.short"))
            rows.append((make_execution(high), "high.short"))
        # Queued exactly as the beat publishes, before the worker starts.
        beat = Beat(BeatConfig(name="prio-beat"))
        sent = beat._publish(
            [Pending(0.0, str(e.id), 1, q, e.tenant_id, e.partition) for e, q in rows]
        )
        assert len(sent) == 2 * EACH
        level = {str(e.id): q.split(".")[0] for e, q in rows}
        with processes(tmp_path) as start:
            # -Q lists low first on purpose: the order of -Q must not be what decides.
            worker = start(
                "w1",
                worker_cmd(queues="low.short,default.short,high.short", concurrency=1, name="w1"),
                CELERY_BROKER_URL=broker,
                CELERY_PREFETCH_MULTIPLIER="1",
                TARGET_TEST_ALLOW=ledger.allow_entry,
                TARGET_RATE_PER_HOST="1000/s",
            )
            wait_for(
                lambda: len(ledger.requests) >= 2 * EACH,
                timeout=45,
                what=f"{2 * EACH} calls (worker log:\n{worker.output()[-3000:]})",
            )
        seen = [
            level[r["headers"]["X-Execution-Id"]]
            for r in sorted(ledger.requests, key=lambda r: r["at"])
        ]
        assert seen == ["high"] * EACH + ["low"] * EACH, seen
    finally:
        ledger.close()
