"""Keyed concurrency through the real processes: two beats sharing the partitions, two
Celery workers, counted at a loopback receiver — one key never has two holders at
once (queue), another key and another tenant's same key run alongside it, a skip
names the key and its holder, and replace cancels the running holder, whose late
result is discarded by fencing."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings

from dispatch.models import Execution, ExecutionEvent, Schedule, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.integration.scheduler.test_beat_admission import cluster, db_now, schedule_to
from tests.support.beat_support import partition_owners
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
__all__ = ["cluster"]  # the fixture, shared with the admission tests


class PerPath:
    """Calls being served at once per request path (the key under test), and the peaks."""

    def __init__(self, hold: Callable[[str], float]) -> None:
        self.hold = hold
        self.now: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)
        self.total = 0
        self.total_peak = 0
        self._lock = threading.Lock()

    def __call__(self, req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        path = str(req["path"]).rsplit("/", 1)[-1]
        with self._lock:
            self.now[path] += 1
            self.peak[path] = max(self.peak[path], self.now[path])
            self.total += 1
            self.total_peak = max(self.total_peak, self.total)
        try:
            time.sleep(max(0.0, self.hold(path)))
        finally:
            with self._lock:
                self.now[path] -= 1
                self.total -= 1
        return 200, {}, b"ok"


def keyed_job(
    principal: Principal, url: str, name: str, customer: int, on_conflict: str, **data: Any
) -> Schedule:
    return schedule_to(
        principal,
        url,
        name=name,
        target={
            "type": "http",
            "url": "https://billing.internal/h",
            "body": {"customer_id": customer},
        },
        concurrency_key={"key": "customer-{target.body.customer_id}", "on_conflict": on_conflict},
        **data,
    )


def states(*schedules: Schedule) -> list[str]:
    """Each job's execution state ("" before the beat fired it)."""
    found = dict(
        Execution.objects.filter(schedule__in=schedules).values_list("schedule_id", "state")
    )
    return [found.get(s.pk, "") for s in schedules]


def test_one_key_one_holder_across_two_beats_skip_and_replace(
    cluster: Callable[..., list[Proc]],
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
    other_tenant: Tenant,
) -> None:
    gauge = PerPath(lambda path: 6.0 if path == "long" else 1.5)
    ledger.respond = gauge
    for t in (tenant, other_tenant):
        t.quota.max_concurrent = 50
        t.quota.max_schedules = 50
        t.quota.save()
    beats = cluster(2)

    def owners() -> dict[int, str]:
        return dict(SchedulerPartition.objects.exclude(owner="").values_list("number", "owner"))

    wait_for(
        lambda: len(set(owners().values())) == 2 and len(owners()) == settings.SCHEDULER_PARTITIONS,
        timeout=30,
        what="two beats sharing the partitions",
    )
    other = make_principal(other_tenant)
    at = db_now() + timedelta(seconds=2)
    # Two of the key's jobs on a partition of each beat: left to their random ids, all
    # four land on one beat's partitions one time in eight.
    by_owner = partition_owners()  # logical partition -> beat
    first = {owner: number for number, owner in sorted(by_owner.items(), reverse=True)}
    spread = sorted(first.values())
    same = [
        keyed_job(
            admin_principal,
            f"{ledger.url}/a42",
            f"q{i}",
            42,
            "queue",
            run_at=at,
            partition=spread[i % 2],
        )
        for i in range(4)
    ]
    assert len({by_owner[s.partition] for s in same}) == 2, "the key spans both beats"
    alongside = [
        keyed_job(admin_principal, f"{ledger.url}/a7", "other-key", 7, "queue", run_at=at),
        keyed_job(other, f"{ledger.url}/b42", "other-tenant", 42, "queue", run_at=at),
    ]
    everything = same + alongside
    wait_for(
        lambda: states(*everything) == ["succeeded"] * 6,
        timeout=60,
        what="every keyed job to succeed",
    )
    assert gauge.peak["a42"] == 1, (dict(gauge.peak), [b.output()[-2000:] for b in beats])
    assert gauge.peak["a7"] == 1 and gauge.peak["b42"] == 1
    assert gauge.total_peak >= 3  # customer-42 held back nothing else
    assert sorted(ledger.effects.values()) == [1] * 6
    held = ExecutionEvent.objects.filter(schedule__in=same, kind="held_key")
    assert held.count() >= 3  # each of the three waited at least once
    assert all(e.message.startswith("held: key customer-42 already ") for e in held)
    assert not ExecutionEvent.objects.filter(schedule__in=alongside, kind="held_key").exists()

    # A long holder of customer-99; a skip while it runs, then a replace.
    long = keyed_job(admin_principal, f"{ledger.url}/long", "long", 99, "queue", run_at=db_now())
    wait_for(lambda: states(long) == ["running"], timeout=20, what="the long holder to run")
    holder = Execution.objects.get(schedule=long)
    skip = keyed_job(admin_principal, f"{ledger.url}/s", "skip", 99, "skip", run_at=db_now())
    wait_for(lambda: states(skip) == ["skipped"], timeout=20, what="the skip")
    skipped = Execution.objects.get(schedule=skip)
    assert skipped.reason == (
        f"skipped: key customer-99 already running execution {holder.pk} "
        "(limit 1, on_conflict skip)"
    )
    replace = keyed_job(
        admin_principal, f"{ledger.url}/r", "replace", 99, "replace", run_at=db_now()
    )
    wait_for(lambda: states(replace) == ["succeeded"], timeout=30, what="the replacing run")
    holder.refresh_from_db()
    assert holder.state == "cancelled" and holder.reason_code == "key_replaced"
    assert holder.fencing_token > 1  # claimed (1), then bumped by the replace
    # The holder's worker finishes its call late: its result is discarded, not recorded.
    wait_for(
        lambda: ExecutionEvent.objects.filter(execution=holder, kind="cancelled_stop").exists(),
        timeout=20,
        what="the replaced run's worker to stop",
    )
    holder.refresh_from_db()
    assert holder.state == "cancelled"
    assert ledger.effects.get(str(holder.pk)) in (None, 1)
