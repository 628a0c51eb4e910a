"""Priorities between queues on a busy worker, with a real worker and receiver:
high-priority messages queued beside low ones are all run first, on Redis (the
default broker) and on RabbitMQ (RABBITMQ_URL; skipped when unset)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from dispatch.models import Execution, Schedule
from dispatch.scheduler.firing import Pending
from dispatch.scheduler.loop import Beat, BeatConfig
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import processes, wait_for, worker_cmd
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
        sent = beat.publish_items(
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


def test_messages_queued_while_the_worker_is_busy_still_run_high_first(
    tmp_path: Path, broker: str, admin_principal: Principal
) -> None:
    """The way users run it: the worker is already busy when the work arrives,
    and its prefetch setting is the platform's default (no override). Messages a
    worker reserved while busy are not reordered, so a default prefetch above 1
    let the first lows published jump ahead of every high published after them."""
    started = threading.Event()

    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if req["path"] == "/busy":
            started.set()
            time.sleep(4)  # holds the worker's only process while the rest is queued
        return 200, {}, b"ok"

    ledger = Ledger(respond)
    try:
        busy = make_schedule(admin_principal, {"type": "http", "url": f"{ledger.url}/busy"})
        target = {"type": "http", "url": f"{ledger.url}/hook"}
        high = make_schedule(admin_principal, target, name="urgent")
        low = make_schedule(admin_principal, target, name="batch")
        Schedule.objects.filter(pk=high.pk).update(priority="high")
        Schedule.objects.filter(pk=low.pk).update(priority="low")
        beat = Beat(BeatConfig(name="prio-busy-beat"))

        def publish(rows: list[tuple[Execution, str]]) -> None:
            sent = beat.publish_items(
                [Pending(0.0, str(e.id), 1, q, e.tenant_id, e.partition) for e, q in rows]
            )
            assert len(sent) == len(rows)

        with processes(tmp_path) as start:
            worker = start(
                "w1",
                worker_cmd(concurrency=1, name="w1"),
                CELERY_BROKER_URL=broker,
                TARGET_TEST_ALLOW=ledger.allow_entry,
                TARGET_RATE_PER_HOST="1000/s",
                CELERY_PREFETCH_MULTIPLIER="",  # empty: the setting's own default
            )
            publish([(make_execution(busy), "default.short")])
            wait_for(
                started.is_set,
                timeout=45,
                what=f"the busy call (worker log:\n{worker.output()[-3000:]})",
            )
            # Lows first: they reach the broker while the worker is busy, before the highs.
            rows = [(make_execution(low), "low.short") for _ in range(EACH)]
            rows += [(make_execution(high), "high.short") for _ in range(EACH)]
            publish(rows)
            level = {str(e.id): q.split(".")[0] for e, q in rows}
            wait_for(
                lambda: len(ledger.requests) >= 1 + 2 * EACH,
                timeout=45,
                what=f"{2 * EACH} calls (worker log:\n{worker.output()[-3000:]})",
            )
        seen = [
            level[r["headers"]["X-Execution-Id"]]
            for r in sorted(ledger.requests, key=lambda r: r["at"])
            if r["path"] == "/hook"
        ]
        assert seen == ["high"] * EACH + ["low"] * EACH, seen
    finally:
        ledger.close()
