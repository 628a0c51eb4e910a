"""The explainer links its evidence by id (`data.audit_id`, `data.related_execution_id`,
`data.replaced_execution_ids`) or by the records' structure, never by a sentence's
wording or by the time two rows were written; rows written before the ids existed
still link."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.explain import explain
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.states import EventData, EventKind
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.support.console_support import TARGET
from tests.support.explain_support import ids

pytestmark = pytest.mark.django_db

MON_0900 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # 09:00 CET
NOW = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)


def alice(tenant: Tenant) -> Principal:
    return Principal(
        tenant=tenant, role=Role.OPERATOR, actor_kind="user", actor_id="1", label="user:alice"
    )


def weekday_9am(principal: Principal, **extra: Any) -> Schedule:
    schedule = services.schedule_create(
        actor=principal,
        data={
            "name": extra.pop("name", "morning-report"),
            "cron": "0 9 * * 1-5",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
            **extra,
        },
    )
    Schedule.objects.filter(pk=schedule.pk).update(created_at=datetime(2025, 12, 1, tzinfo=UTC))
    schedule.refresh_from_db()
    return schedule


def execution(schedule: Schedule, at: datetime, **fields: Any) -> Execution:
    values: dict[str, Any] = {"due_at": at, "state": "scheduled", "trigger": "cron"}
    values.update(fields)
    return Execution.objects.create(
        schedule=schedule,
        tenant=schedule.tenant,
        partition=schedule.partition,
        scheduled_for=at,
        **values,
    )


# --------------------------------------------------------------------------- audit_id


def test_pause_and_resume_events_name_their_audit_rows_and_the_explainer_follows_the_ids(
    tenant: Tenant,
) -> None:
    p = alice(tenant)
    s = weekday_9am(p)
    services.schedule_pause(actor=p, schedule_id=s.id, reason="deploy freeze")
    services.schedule_resume(actor=p, schedule_id=s.id)
    paused = ExecutionEvent.objects.get(schedule=s, kind=EventKind.PAUSED)
    resumed = ExecutionEvent.objects.get(schedule=s, kind=EventKind.RESUMED)
    p_audit = AuditEvent.objects.get(action="schedule.pause", object_id=str(s.id))
    r_audit = AuditEvent.objects.get(action="schedule.resume", object_id=str(s.id))
    assert paused.data[EventData.AUDIT_ID] == p_audit.pk
    assert resumed.data[EventData.AUDIT_ID] == r_audit.pk
    # Put the pause around Monday 09:00 and add decoy audit rows of the same action and
    # actor right after each event: any rule by time would take the decoys (the audit
    # log is append-only, so the real rows keep today's time); only the ids lead back.
    ExecutionEvent.objects.filter(pk=paused.pk).update(at=MON_0900 - timedelta(minutes=5))
    ExecutionEvent.objects.filter(pk=resumed.pk).update(at=MON_0900 + timedelta(minutes=20))
    for action, at in (
        ("schedule.pause", MON_0900 - timedelta(minutes=5)),
        ("schedule.resume", MON_0900 + timedelta(minutes=20)),
    ):
        AuditEvent.objects.create(
            tenant=tenant, at=at, actor_kind="user", actor_label="user:alice",
            action=action, object_type="schedule", object_id=str(s.id),
        )  # fmt: skip
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert answer.sentence == (
        "not run at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): the schedule was paused by alice "
        'at 2026-01-05 08:55 CET ("deploy freeze"); alice resumed it at 2026-01-05 09:20 CET'
    )
    assert ids(answer, "audit") == {str(p_audit.pk), str(r_audit.pk)}


def test_trigger_and_lifecycle_events_name_their_audit_rows(tenant: Tenant) -> None:
    p = alice(tenant)
    s = weekday_9am(p)
    services.schedule_trigger(actor=p, schedule_id=s.id)
    services.schedule_delete(actor=p, schedule_id=s.id)
    for kind, action in (
        (EventKind.CREATED, "schedule.create"),
        (EventKind.TRIGGERED, "schedule.trigger"),
        (EventKind.DELETED, "schedule.delete"),
    ):
        ev = ExecutionEvent.objects.get(schedule=s, kind=kind)
        audit = AuditEvent.objects.get(action=action, object_id=str(s.id))
        assert ev.data[EventData.AUDIT_ID] == audit.pk, kind


def test_old_pause_events_without_audit_id_link_the_audit_row_their_service_wrote_next(
    tenant: Tenant,
) -> None:
    """Before events carried audit_id the service wrote the event, then the audit row:
    each pause's row is the first after its event and before the next pause."""
    s = weekday_9am(alice(tenant))

    def record(kind: str, action: str, at: datetime, audit_at: datetime) -> AuditEvent:
        ExecutionEvent.objects.create(
            tenant=tenant, schedule=s, kind=kind, message=f"{kind} by user:alice", at=at,
            actor="user:alice", data={"reason": "", "until": None},
        )  # fmt: skip
        return AuditEvent.objects.create(
            tenant=tenant, at=audit_at, actor_kind="user", actor_label="user:alice",
            action=action, object_type="schedule", object_id=str(s.id),
        )  # fmt: skip

    # 30 s between event and audit row (past the old 5-second window) still pairs them.
    first = record("paused", "schedule.pause", MON_0900 - timedelta(hours=1),
                   MON_0900 - timedelta(hours=1) + timedelta(seconds=30))  # fmt: skip
    resumed = record("resumed", "schedule.resume", MON_0900 + timedelta(hours=1),
                     MON_0900 + timedelta(hours=1))  # fmt: skip
    record("paused", "schedule.pause", MON_0900 + timedelta(days=1),
           MON_0900 + timedelta(days=1))  # fmt: skip
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert ids(answer, "audit") == {str(first.pk), str(resumed.pk)}


def test_an_old_pause_without_any_audit_row_still_explains(tenant: Tenant) -> None:
    s = weekday_9am(alice(tenant))
    ExecutionEvent.objects.create(
        tenant=tenant, schedule=s, kind="paused", message="paused by user:alice",
        at=MON_0900 - timedelta(hours=1), actor="user:alice", data={},
    )  # fmt: skip
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert "paused by alice at 2026-01-05 08:00 CET and is still paused" in answer.sentence
    assert ids(answer, "audit") == set()


# --------------------------------------------------------------------------- related runs


def test_a_manual_trigger_skipped_by_overlap_names_the_active_run_by_id(tenant: Tenant) -> None:
    p = alice(tenant)
    s = weekday_9am(p, concurrency="forbid")
    active = execution(s, MON_0900, state="running", started_at=MON_0900)
    run = services.schedule_trigger(actor=p, schedule_id=s.id)
    assert run.state == "skipped"
    triggered = ExecutionEvent.objects.get(execution=run, kind=EventKind.TRIGGERED)
    assert triggered.data[EventData.RELATED_EXECUTION_ID] == str(active.id)
    answer = explain(schedule=s, at=run.scheduled_for, now=services.db_now())
    assert answer.code == "skipped_overlap"
    assert ids(answer, "execution") == {str(run.id), str(active.id)}


def test_the_related_execution_id_is_followed_not_an_id_in_the_reason_text(
    tenant: Tenant,
) -> None:
    s = weekday_9am(alice(tenant), concurrency="forbid")
    named = execution(
        s,
        MON_0900 - timedelta(days=3),
        state="succeeded",
        started_at=MON_0900 - timedelta(days=3),
        finished_at=MON_0900 - timedelta(days=3),
    )
    decoy = execution(s, MON_0900 - timedelta(days=2), state="succeeded")
    skipped = execution(
        s,
        MON_0900,
        state="skipped",
        reason_code="overlap_forbid",
        reason=f"skipped: previous run {decoy.id} still running (overlap forbid)",
    )
    ExecutionEvent.objects.create(
        tenant=tenant,
        schedule=s,
        execution=skipped,
        kind=EventKind.TRIGGERED,
        message="triggered manually by user:alice",
        data={EventData.RELATED_EXECUTION_ID: str(named.id)},
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "skipped_overlap"
    assert ids(answer, "execution") == {str(skipped.id), str(named.id)}


def test_a_run_replaced_by_a_manual_trigger_links_the_run_that_replaced_it(
    tenant: Tenant,
) -> None:
    p = alice(tenant)
    s = weekday_9am(p, concurrency="replace")
    old = execution(s, MON_0900, state="running", started_at=MON_0900)
    run = services.schedule_trigger(actor=p, schedule_id=s.id)
    triggered = ExecutionEvent.objects.get(execution=run, kind=EventKind.TRIGGERED)
    assert triggered.data[EventData.REPLACED_EXECUTION_IDS] == [str(old.id)]
    answer = explain(schedule=s, at=MON_0900, now=services.db_now())
    assert answer.code == "cancelled"
    assert answer.sentence.endswith(
        "after it had started: cancelled: replaced by a manual run (overlap replace)"
    )
    assert ids(answer, "execution") == {str(old.id), str(run.id)}


def test_an_upstream_skip_links_the_upstream_run_of_the_same_occurrence(tenant: Tenant) -> None:
    p = alice(tenant)
    upstream = weekday_9am(p, name="nightly-export")
    dependent = weekday_9am(p, name="report", depends_on=[str(upstream.id)])
    dead = execution(upstream, MON_0900, state="dead", started_at=MON_0900, finished_at=MON_0900)
    execution(upstream, MON_0900 - timedelta(days=1), state="dead")  # another occurrence
    skipped = execution(
        dependent,
        MON_0900,
        state="skipped",
        reason_code="upstream",
        trigger="dependency",
        reason="skipped: upstream nightly-export dead",  # no id in the text
    )
    answer = explain(schedule=dependent, at=MON_0900, now=NOW)
    assert answer.code == "skipped_upstream"
    assert ids(answer, "execution") == {str(skipped.id), str(dead.id)}
