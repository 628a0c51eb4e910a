"""B runs after A succeeds, for the same occurrence; A failing or skipped skips B, naming A."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.scheduler import dependencies
from dispatch.sql import sql
from dispatch.states import FINAL_STATES, state_values
from tenants.roles import Principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
AT = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)


def sched(p: Principal, name: str, **extra: Any) -> Schedule:
    return services.schedule_create(
        actor=p, data={"name": name, "cron": "0 2 * * *", "target": TARGET} | extra
    )


def finish(s: Schedule, state: str) -> Execution:
    ex = execution_row(s, AT, state=state)
    with transaction.atomic():
        dependencies.propagate(execution_ids=[ex.id])
    return ex


def test_dependent_is_not_self_fired_and_runs_after_upstream_succeeds(
    admin_principal: Principal,
) -> None:
    a = sched(admin_principal, "export")
    b = sched(admin_principal, "report", depends_on=[str(a.id)])
    assert b.next_run_at is None and a.next_run_at is not None
    finish(a, "succeeded")
    run = Execution.objects.get(schedule=b)
    assert run.scheduled_for == AT and run.trigger == "dependency" and run.state == "scheduled"
    finish_again = dependencies.propagate(execution_ids=[Execution.objects.get(schedule=a).id])
    assert finish_again == 0  # idempotent: one execution per occurrence


@pytest.mark.parametrize("state", ["dead", "skipped", "cancelled"])
def test_upstream_failure_skips_dependent_naming_it(admin_principal: Principal, state: str) -> None:
    a = sched(admin_principal, "nightly-export")
    b = sched(admin_principal, "report", depends_on=[str(a.id)])
    up = finish(a, state)
    skipped = Execution.objects.get(schedule=b)
    assert skipped.state == "skipped" and skipped.reason_code == "upstream"
    assert (
        "nightly-export" in skipped.reason
        and str(up.id) in skipped.reason
        and state in skipped.reason
    )


def test_dependent_with_two_upstreams_waits_for_both(admin_principal: Principal) -> None:
    a, c = sched(admin_principal, "a"), sched(admin_principal, "c")
    b = sched(admin_principal, "b", depends_on=[str(a.id), str(c.id)])
    finish(a, "succeeded")
    assert not Execution.objects.filter(schedule=b).exists()
    finish(c, "succeeded")
    assert Execution.objects.get(schedule=b).state == "scheduled"


def test_dependency_cycles_are_refused(admin_principal: Principal) -> None:
    from dispatch.exceptions import InvalidSchedule

    a = sched(admin_principal, "a")
    b = sched(admin_principal, "b", depends_on=[str(a.id)])
    with pytest.raises(InvalidSchedule, match="cycle"):
        services.schedule_update(
            actor=admin_principal,
            schedule_id=a.id,
            data={"depends_on": [str(b.id)]},
            expected_version=None,
        )


def test_worker_completion_fires_the_dependent_in_the_same_transaction(
    admin_principal: Principal,
) -> None:
    from dispatch.worker import leases

    a = sched(admin_principal, "export")
    b = sched(admin_principal, "report", depends_on=[str(a.id)])
    past = services.db_now() - timedelta(minutes=1)
    ex = execution_row(a, past, state="queued")
    claim = leases.execution_claim(execution_id=str(ex.id), attempt=1, owner="w-test", lease_s=30)
    assert claim is not None
    assert leases.attempt_finish(claim=claim, state="succeeded", events=[])
    follow = Execution.objects.get(schedule=b)
    assert (
        follow.scheduled_for == past
        and follow.trigger == "dependency"
        and follow.state == "scheduled"
    )


def test_finished_upstream_fires_all_its_dependents_in_one_statement(
    admin_principal: Principal,
) -> None:
    a, other = sched(admin_principal, "export"), sched(admin_principal, "ledger")
    ready = [sched(admin_principal, f"report-{n}", depends_on=[str(a.id)]) for n in range(3)]
    waiting = sched(admin_principal, "summary", depends_on=[str(a.id), str(other.id)])
    ex = Execution.objects.create(
        schedule=a,
        tenant=a.tenant,
        partition=a.partition,
        scheduled_for=AT,
        due_at=AT,
        state="succeeded",
    )
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        written = dependencies.propagate(execution_ids=[ex.id])
    assert len(captured.captured_queries) == 1, [q["sql"] for q in captured.captured_queries]
    assert written == 3
    runs = Execution.objects.filter(schedule__in=ready)
    assert sorted(r.schedule_id for r in runs) == sorted(s.id for s in ready)
    assert {(r.state, r.trigger, r.scheduled_for, r.reason_code, r.reason) for r in runs} == {
        ("scheduled", "dependency", AT, "", "")
    }
    assert all(r.fired_by == "dependency" and r.fencing_token == 0 for r in runs)
    assert not Execution.objects.filter(schedule=waiting).exists()  # ledger has not succeeded


def test_failed_upstream_skips_all_its_dependents_naming_it(admin_principal: Principal) -> None:
    a = sched(admin_principal, "nightly-export")
    deps = [sched(admin_principal, f"report-{n}", depends_on=[str(a.id)]) for n in range(3)]
    up = finish(a, "dead")
    skipped = Execution.objects.filter(schedule__in=deps)
    assert len(skipped) == 3
    assert {(r.state, r.reason_code, r.reason, r.queue, r.error) for r in skipped} == {
        (
            "skipped",
            "upstream",
            f"skipped: upstream nightly-export dead (execution {up.id})",
            "",
            "",
        )
    }


def test_propagation_wakes_beats_only_for_scheduled_occurrences(
    admin_principal: Principal,
) -> None:
    a, b = sched(admin_principal, "a"), sched(admin_principal, "b")
    for n in range(2):
        sched(admin_principal, f"after-a-{n}", depends_on=[str(a.id)])
        sched(admin_principal, f"after-b-{n}", depends_on=[str(b.id)])
    ok, dead = (
        Execution.objects.create(
            schedule=s,
            tenant=s.tenant,
            partition=s.partition,
            scheduled_for=AT,
            due_at=AT,
            state=state,
        )
        for s, state in ((a, "succeeded"), (b, "dead"))
    )
    with transaction.atomic():
        row = sql.one(
            "propagate_dependents",
            {
                "ids": [str(ok.id), str(dead.id)],
                "final": state_values(FINAL_STATES),
                "channel": services.WAKE_CHANNEL,
            },
        )
    assert row is not None and (row.written, row.woken) == (4, 2)
