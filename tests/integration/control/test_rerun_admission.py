"""The beat admits a re-run like a manual run: the first attempt of its chain is
decided by the overlap policy (forbid skips it while another run is active,
replace cancels that run) and counts against the daily quota once.

A real beat (in-process, cycled by the test) against the real database and broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.scheduler.loop import Beat
from tenants.models import Tenant
from tenants.roles import Principal
from tests.support.beat_support import empty_queues, running_beat
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture
def beat(db: Any) -> Iterator[Beat]:
    with empty_queues(), running_beat("rerun-beat", cycle_s=0.2) as b:
        yield b


def _pair(principal: Principal, overlap: str) -> tuple[Execution, Execution]:
    """A dead run of yesterday's occurrence and a run of today's still running."""
    schedule: Schedule = services.schedule_create(
        actor=principal,
        data={"name": f"nightly-{overlap}", "cron": "0 3 * * *", "target": TARGET}
        | {"concurrency": overlap},
    )
    now = db_now().replace(microsecond=0)
    dead = execution_row(
        schedule, now - timedelta(days=1), state="dead", attempt=3, finished_at=now
    )
    running = execution_row(
        schedule,
        now - timedelta(minutes=1),
        state="running",
        fencing_token=1,
        started_at=now,
        lease_expires_at=now + timedelta(hours=1),
    )
    return dead, running


def test_forbid_skips_a_rerun_while_another_run_is_active(
    beat: Beat, admin_principal: Principal
) -> None:
    dead, running = _pair(admin_principal, "forbid")
    services.execution_rerun(actor=admin_principal, execution_id=dead.id)
    beat.cycle()
    dead.refresh_from_db()
    assert dead.state == "skipped" and dead.reason_code == "overlap_forbid", dead.reason
    assert str(running.id) in dead.reason
    assert Execution.objects.get(pk=running.pk).state == "running"


def test_replace_lets_the_rerun_cancel_the_active_run(
    beat: Beat, admin_principal: Principal
) -> None:
    dead, running = _pair(admin_principal, "replace")
    services.execution_rerun(actor=admin_principal, execution_id=dead.id)
    beat.cycle()
    dead.refresh_from_db()
    running.refresh_from_db()
    assert (dead.state, dead.attempt) == ("queued", 4)
    assert running.state == "cancelled" and running.reason_code == "replaced"


def test_a_rerun_counts_once_against_the_daily_quota(
    beat: Beat, admin_principal: Principal, tenant: Tenant
) -> None:
    dead, _ = _pair(admin_principal, "allow")
    services.execution_rerun(actor=admin_principal, execution_id=dead.id)
    day = db_now().strftime("%Y%m%d")
    key = f"sched:quota:{tenant.id}:{day}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    before = int(client.get(key) or 0)
    tenant.quota.max_executions_per_day = 1000
    tenant.quota.save()
    beat.cycle()
    assert Execution.objects.get(pk=dead.pk).state == "queued"
    assert int(client.get(key) or 0) == before + 1


def test_the_lease_sweep_counts_a_reruns_attempts_from_its_base(
    admin_principal: Principal,
) -> None:
    from dispatch.scheduler import sweeper

    schedule = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "swept",
            "cron": "0 3 * * *",
            "target": TARGET,
            "retry": {"max_attempts": 2, "backoff": "fixed", "initial_s": 0, "max_s": 0},
        },
    )
    now = db_now()
    # The first attempt of a re-run (row attempt 4 after a chain of 3) lost its worker.
    lost = execution_row(
        schedule,
        now.replace(microsecond=0) - timedelta(days=1),
        state="running",
        attempt=4,
        attempt_base=3,
        reruns=1,
        fencing_token=7,
        started_at=now - timedelta(seconds=5),
        lease_expires_at=now - timedelta(seconds=1),
    )
    assert sweeper.sweep_expired_leases(partitions=None) == 1
    lost.refresh_from_db()
    assert (lost.state, lost.attempt) == ("retry_scheduled", 5), lost.reason
