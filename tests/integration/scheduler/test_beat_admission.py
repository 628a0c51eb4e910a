"""Admission at due time with real beats and real Celery workers, measured at a
loopback receiver: tenant concurrency caps and DISPATCH_MAX_INFLIGHT hold across
beats, and the overlap policy is decided when the occurrence is due."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from dispatch import explain, services
from dispatch.models import Execution, ExecutionEvent, Schedule, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.beat_support import partition_owners
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, processes, wait_for
from tests.support.worker_support import db_now, purge, worker_processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
QUEUES = "high.short,default.short,low.short"


class Gauge:
    """How many calls the receiver is serving at once, and the most ever seen."""

    def __init__(self, hold: Callable[[dict[str, Any]], float]) -> None:
        self.hold = hold
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(max(0.0, self.hold(req)))
        finally:
            with self._lock:
                self.now -= 1
        return 200, {}, b"ok"


@pytest.fixture
def cluster(tmp_path: Path, ledger: Ledger) -> Iterator[Callable[..., list[Proc]]]:
    """start(beats=N, **beat_env): N more beats, and on the first call two workers
    (8 slots) calling the ledger."""
    purge(settings.CELERY_BROKER_URL)
    started: list[Proc] = []  # the workers
    seq = itertools.count()
    with (
        processes(tmp_path) as start_beat,
        worker_processes(tmp_path) as start_worker,
    ):

        def start(beats: int, *, lookahead: float = 2.0, **env: str) -> list[Proc]:
            if not started:
                started.extend(
                    start_worker(
                        f"w{i}",
                        queues=QUEUES,
                        concurrency=4,
                        TARGET_TEST_ALLOW=ledger.allow_entry,
                        EXECUTION_LEASE_S="10",
                    )
                    for i in range(2)
                )
            names = [f"beat-{next(seq)}" for _ in range(beats)]
            return [
                start_beat(
                    name,
                    beat_cmd(
                        "--name",
                        name,
                        "--lease-ttl",
                        "5",
                        "--cycle",
                        "0.2",
                        "--lookahead",
                        str(lookahead),
                    ),
                    SWEEP_INTERVAL_S="0.5",
                    **({"QUEUED_REPUBLISH_S": "3"} | env),
                )
                for name in names
            ]

        yield start
    purge(settings.CELERY_BROKER_URL)


def schedule_to(
    principal: Principal,
    url: str,
    *,
    timeout_s: int = 30,
    partition: int | None = None,
    **data: Any,
) -> Schedule:
    """A schedule calling the loopback ledger: saved with a placeholder target (the
    save-time SSRF check refuses loopback) and repointed in the same transaction —
    onto `partition` too when given, so a test decides which beat owns it instead of
    the schedule's random id."""
    with transaction.atomic():
        if "run_at" in data:
            schedule, _ = services.job_create(
                actor=principal,
                data={"target": {"type": "http", "url": "https://billing.internal/h"}} | data,
            )
        else:
            schedule = services.schedule_create(
                actor=principal,
                data={"target": {"type": "http", "url": "https://billing.internal/h"}} | data,
            )
        Schedule.objects.filter(pk=schedule.pk).update(
            target={"type": "http", "url": url, "method": "POST", "timeout_s": timeout_s},
            timeout_s=timeout_s,
        )
        if partition is not None:
            Schedule.objects.filter(pk=schedule.pk).update(partition=partition)
            Execution.objects.filter(schedule=schedule).update(partition=partition)
            schedule.partition = partition
    return schedule


def jobs(principal: Principal, url: str, count: int, *, at: datetime, prefix: str) -> list[str]:
    return [
        str(schedule_to(principal, url, name=f"{prefix}{i}", run_at=at).pk) for i in range(count)
    ]


def all_succeeded(ids: list[str]) -> bool:
    return Execution.objects.filter(schedule_id__in=ids, state="succeeded").count() == len(ids)


def test_tenant_cap_holds_across_three_beats(
    cluster: Callable[..., list[Proc]],
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
) -> None:
    """Cap 2, ten jobs due at one instant on every beat's partitions: each beat used to
    read the tenant's in-flight count on its own and publish into the same room."""
    gauge = Gauge(lambda req: 1.5)
    ledger.respond = gauge
    tenant.quota.max_concurrent = 2
    tenant.quota.max_schedules = 50
    tenant.quota.save()
    beats = cluster(3)

    def owners() -> dict[int, str]:
        return dict(SchedulerPartition.objects.exclude(owner="").values_list("number", "owner"))

    wait_for(
        lambda: len(set(owners().values())) == 3 and len(owners()) == settings.SCHEDULER_PARTITIONS,
        timeout=30,
        what="three beats sharing the partitions",
    )
    ids = jobs(admin_principal, ledger.url, 10, at=db_now() + timedelta(seconds=2), prefix="c")
    parts = {Schedule.objects.get(pk=i).partition for i in ids}

    # Read at a moment every one of their ranges is leased: the three beats may still be
    # handing a range over (released by one, not yet taken by the next).
    def leased() -> dict[int, str] | None:
        found = partition_owners()
        return found if parts <= found.keys() else None

    by_owner = wait_for(leased, timeout=30, what="the jobs' partitions leased")
    assert len({by_owner[p] for p in parts}) >= 2
    wait_for(lambda: all_succeeded(ids), timeout=60, what="all ten jobs to succeed")
    assert gauge.peak <= 2, (gauge.peak, [b.output()[-2000:] for b in beats])
    assert gauge.peak == 2  # the cap is used, not just respected
    assert sorted(ledger.effects.values()) == [1] * 10
    held = ExecutionEvent.objects.filter(schedule_id__in=ids, kind="held_concurrency")
    assert held.exists()
    assert {e.message for e in held} == {"waiting: tenant billing at its concurrency limit 2"}


@pytest.mark.parametrize("beats", [1, 2])
def test_platform_cap_counts_every_tenant_in_flight(
    beats: int,
    cluster: Callable[..., list[Proc]],
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
    other_tenant: Tenant,
) -> None:
    """DISPATCH_MAX_INFLIGHT=4, two tenants due 0.6 s apart: the platform-wide
    total used to sum only the tenants of the batch, so the second tenant's batch
    found the platform empty."""
    gauge = Gauge(lambda req: 2.0)
    ledger.respond = gauge
    for t in (tenant, other_tenant):
        t.quota.max_concurrent = 100
        t.quota.max_schedules = 100
        t.quota.save()
    cluster(beats, DISPATCH_MAX_INFLIGHT="4")
    time.sleep(2)  # the beats take their partitions
    at = db_now() + timedelta(seconds=2)
    # The first tenant's four fill the platform without any left waiting, so the
    # second tenant's batch holds none of the first tenant's executions.
    ids = jobs(admin_principal, ledger.url, 4, at=at, prefix="a")
    ids += jobs(
        make_principal(other_tenant), ledger.url, 4, at=at + timedelta(seconds=0.6), prefix="b"
    )
    wait_for(lambda: all_succeeded(ids), timeout=60, what="all eight jobs to succeed")
    assert gauge.peak <= 4, gauge.peak
    assert gauge.peak == 4
    assert sorted(ledger.effects.values()) == [1] * 8
    assert ExecutionEvent.objects.filter(schedule_id__in=ids, kind="held_capacity").exists()


def test_a_beat_dying_after_admission_leaks_no_slot(
    cluster: Callable[..., list[Proc]],
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
) -> None:
    """Cap 2, four jobs: a beat admits two (queued: their slots taken) and dies before
    publishing. The slots are those rows, not a counter: the next owner re-publishes
    them, they run, and the two held back are admitted once they finish."""
    gauge = Gauge(lambda req: 1.0)
    ledger.respond = gauge
    tenant.quota.max_concurrent = 2
    tenant.quota.save()
    (crashing,) = cluster(1, SCHED_FAULT_POINT="after_admit")
    ids = jobs(admin_principal, ledger.url, 4, at=db_now() + timedelta(seconds=1), prefix="k")
    wait_for(lambda: not crashing.alive(), timeout=20, what="the beat to die after admitting")
    assert crashing.proc.returncode == 137
    states = sorted(Execution.objects.filter(schedule_id__in=ids).values_list("state", flat=True))
    assert states == ["queued", "queued", "scheduled", "scheduled"]
    assert ledger.requests == []  # nothing was published
    cluster(1)
    wait_for(lambda: all_succeeded(ids), timeout=40, what="all four jobs to succeed")
    assert gauge.peak <= 2, gauge.peak
    assert sorted(ledger.effects.values()) == [1] * 4


def test_overlap_is_decided_when_the_occurrence_is_due(
    cluster: Callable[..., list[Proc]], ledger: Ledger, admin_principal: Principal
) -> None:
    """A `* * * * *` schedule whose previous run ends 4 s before the next occurrence, with
    a 10 s lookahead: the occurrence is planned while the previous run still runs, but
    the overlap policy must look at it when the occurrence is due — then it has ended.
    (The previous run is a manual one, started well before the lookahead window, so
    the test waits for one minute boundary instead of two.)"""
    cluster(2, lookahead=10.0)
    gauge = Gauge(lambda req: 1.0)
    ledger.respond = gauge
    with transaction.atomic():
        schedules = {
            policy: schedule_to(
                admin_principal,
                f"{ledger.url}/{policy}",
                timeout_s=90,
                name=f"every-minute-{policy}",
                cron="* * * * *",
                jitter_s=0,
                concurrency=policy,
            )
            for policy in ("forbid", "replace")
        }
        # The next occurrence far enough ahead that the manual runs below start
        # before the beats plan it.
        now = db_now()
        boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if (boundary - now).total_seconds() < 16:
            boundary += timedelta(minutes=1)
        Schedule.objects.filter(pk__in=[s.pk for s in schedules.values()]).update(
            next_run_at=boundary
        )
    end_of_previous = boundary.timestamp() - 4  # same host: the ledger's clock is the DB's
    gauge.hold = lambda req: (
        end_of_previous - time.time() if time.time() < boundary.timestamp() - 6 else 1.0
    )
    manual = {
        policy: services.schedule_trigger(actor=admin_principal, schedule_id=s.pk)
        for policy, s in schedules.items()
    }
    assert all(m.state == "scheduled" for m in manual.values())
    wait_for(
        lambda: (
            Execution.objects.filter(
                schedule__in=list(schedules.values()), scheduled_for=boundary
            ).count()
            == 2
        ),
        timeout=(boundary - db_now()).total_seconds() + 5,
        what="the occurrence planned within the lookahead",
    )
    # Planned while the previous runs are still running: nothing decided yet.
    assert (
        Execution.objects.filter(pk__in=[m.pk for m in manual.values()], state="running").count()
        == 2
    )
    ids = [str(s.pk) for s in schedules.values()]
    wait_for(
        lambda: Execution.objects.filter(schedule_id__in=ids, state="succeeded").count() == 4,
        timeout=(boundary - db_now()).total_seconds() + 30,
        what="both runs of both schedules to succeed",
    )
    assert not Execution.objects.filter(schedule_id__in=ids).exclude(state="succeeded").exists()
    for policy, s in schedules.items():
        previous = Execution.objects.get(pk=manual[policy].pk)
        due = Execution.objects.get(schedule=s, scheduled_for=boundary)
        assert previous.finished_at < due.started_at, policy  # no overlap, and no skip
        answer = explain.explain(schedule=s, at=boundary)
        assert answer.code == "ran", (policy, answer.sentence)
    assert sorted(ledger.effects.values()) == [1] * 4
