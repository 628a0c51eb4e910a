"""The explainer answers from recorded state: each test writes the rows the
beat, the workers or the services would have written (executions, events,
audit entries) and checks the code, the sentence and the evidence."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.explain import CODES, explain
from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.conftest import make_principal
from tests.support.console_support import TARGET
from tests.support.explain_support import CREATED, amsterdam_schedule, ids
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

# Monday 2026-01-05, 09:00 in Amsterdam (CET, UTC+1) is 08:00 UTC.
MON_0900 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
NOW = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)


def alice(tenant: Tenant) -> Principal:
    return Principal(
        tenant=tenant, role=Role.OPERATOR, actor_kind="user", actor_id="1", label="user:alice"
    )


def weekday_9am(principal: Principal, *, created: datetime | None = None, **extra: Any) -> Schedule:
    name = extra.pop("name", "morning-report")
    return amsterdam_schedule(
        principal, "0 9 * * 1-5", name=name, created=created or CREATED, **extra
    )


def execution(schedule: Schedule, at: datetime, **fields: Any) -> Execution:
    return execution_row(schedule, at, **({"trigger": "cron"} | fields))


def event(
    schedule: Schedule, kind: str, message: str, at: datetime, **fields: Any
) -> ExecutionEvent:
    return ExecutionEvent.objects.create(
        tenant=schedule.tenant, schedule=schedule, kind=kind, message=message, at=at, **fields
    )


def record_pause(
    schedule: Schedule, *, by: str, at: datetime, reason: str = ""
) -> tuple[ExecutionEvent, AuditEvent]:
    """What services.schedule_pause writes: an event and an audit row in one transaction (same time)."""
    ev = event(
        schedule,
        "paused",
        f"paused by user:{by}" + (f' ("{reason}")' if reason else ""),
        at,
        actor=f"user:{by}",
        data={"reason": reason, "until": None},
    )
    audit = AuditEvent.objects.create(
        tenant=schedule.tenant,
        at=at,
        actor_kind="user",
        actor_label=f"user:{by}",
        action="schedule.pause",
        object_type="schedule",
        object_id=str(schedule.id),
    )
    return ev, audit


def record_resume(
    schedule: Schedule, *, by: str, at: datetime
) -> tuple[ExecutionEvent, AuditEvent]:
    ev = event(schedule, "resumed", f"resumed by user:{by}", at, actor=f"user:{by}")
    audit = AuditEvent.objects.create(
        tenant=schedule.tenant,
        at=at,
        actor_kind="user",
        actor_label=f"user:{by}",
        action="schedule.resume",
        object_type="schedule",
        object_id=str(schedule.id),
    )
    return ev, audit


def test_it_ran_names_the_execution_its_outcome_and_the_attempt_event(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(
        s,
        MON_0900,
        state="succeeded",
        started_at=MON_0900 + timedelta(seconds=1),
        finished_at=MON_0900 + timedelta(seconds=1, milliseconds=200),
        status_code=200,
        enqueued_at=MON_0900,
    )
    ok = event(
        s, "attempt_succeeded", "attempt 1 succeeded (HTTP 200) in 180 ms", MON_0900, execution=e
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "ran"
    assert answer.sentence == (
        f"it did run: execution {e.id} for 2026-01-05 09:00 CET (2026-01-05 08:00 UTC) "
        "succeeded at 2026-01-05 09:00:01.2 CET (HTTP 200), attempt 1"
    )
    assert ids(answer, "execution") == {str(e.id)} and ids(answer, "event") == {str(ok.pk)}
    assert answer.occurrence == MON_0900 and answer.execution_id == str(e.id)


def test_a_dead_run_says_so_with_the_reason(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(
        s,
        MON_0900,
        state="dead",
        attempt=3,
        started_at=MON_0900,
        finished_at=MON_0900 + timedelta(minutes=2),
        reason="HTTP 503 — attempts exhausted (3 of 3)",
        error="HTTP 503",
    )
    answer = explain(schedule=s, at=MON_0900 + timedelta(seconds=30), now=NOW)
    assert answer.code == "dead"
    assert f"execution {e.id}" in answer.sentence
    assert (
        "is dead after 3 attempt(s)" in answer.sentence
        and "attempts exhausted (3 of 3)" in answer.sentence
    )


def test_not_an_occurrence_gives_the_previous_and_next(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    answer = explain(schedule=s, at=MON_0900 + timedelta(minutes=30), now=NOW)
    assert answer.code == "not_an_occurrence"
    assert answer.sentence == (
        "2026-01-05 09:30 CET (2026-01-05 08:30 UTC) is not an occurrence of '0 9 * * 1-5' "
        "(At 09:00 AM, Monday through Friday) in Europe/Amsterdam; "
        "the previous one was 2026-01-05 09:00 CET (2026-01-05 08:00 UTC); "
        "the next one is 2026-01-06 09:00 CET (2026-01-06 08:00 UTC)"
    )
    assert ids(answer, "schedule") == {str(s.id)}
    # Saturday is not a weekday occurrence either.
    assert (
        explain(schedule=s, at=datetime(2026, 1, 10, 8, 0, tzinfo=UTC), now=NOW).code
        == "not_an_occurrence"
    )


def test_spring_forward_gap_time_ran_at_the_end_of_the_gap(tenant: Tenant) -> None:
    s = amsterdam_schedule(
        make_principal(tenant),
        "30 2 * * *",
        name="half-past-two",
        created=datetime(2026, 1, 1, tzinfo=UTC),
    )
    gap_end = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
    e = execution(
        s,
        gap_end,
        state="succeeded",
        started_at=gap_end,
        finished_at=gap_end + timedelta(seconds=2),
    )
    # "02:30" read with the offset before the gap (+01:00) is 01:30 UTC.
    answer = explain(
        schedule=s, at=datetime(2026, 3, 29, 1, 30, tzinfo=UTC), now=NOW + timedelta(days=90)
    )
    assert answer.code == "dst_shifted"
    assert answer.sentence.startswith(
        "02:30 did not exist on 2026-03-29 in Europe/Amsterdam; it ran at 03:00 CEST. It did run: "
        f"execution {e.id}"
    )
    assert answer.occurrence == gap_end and ids(answer, "execution") == {str(e.id)}


def test_fall_back_second_copy_of_a_fixed_time_is_explained_as_the_first(tenant: Tenant) -> None:
    s = amsterdam_schedule(
        make_principal(tenant), "30 2 * * *", name="fold", created=datetime(2026, 1, 1, tzinfo=UTC)
    )
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST
    e = execution(
        s, first, state="succeeded", started_at=first, finished_at=first + timedelta(seconds=1)
    )
    answer = explain(
        schedule=s, at=datetime(2026, 10, 25, 1, 30, tzinfo=UTC), now=NOW + timedelta(days=300)
    )
    assert answer.code == "dst_shifted"
    assert answer.sentence.startswith(
        "02:30 occurred twice on 2026-10-25 in Europe/Amsterdam; it ran once, at the first (CEST). It did run"
    )
    assert answer.execution_id == str(e.id)


def test_paused_names_who_when_why_and_who_resumed(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    p_ev, p_audit = record_pause(
        s, by="alice", at=MON_0900 - timedelta(minutes=5), reason="deploy freeze"
    )
    r_ev, r_audit = record_resume(s, by="bob", at=MON_0900 + timedelta(minutes=20))
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert answer.sentence == (
        "not run at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): the schedule was paused by alice "
        'at 2026-01-05 08:55 CET ("deploy freeze"); bob resumed it at 2026-01-05 09:20 CET'
    )
    assert ids(answer, "event") == {str(p_ev.pk), str(r_ev.pk)}
    assert ids(answer, "audit") == {str(p_audit.pk), str(r_audit.pk)}


def test_paused_occurrence_skipped_on_resume_is_explained_as_the_pause(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant), misfire="skip")
    record_pause(s, by="alice", at=MON_0900 - timedelta(minutes=5), reason="deploy freeze")
    record_resume(s, by="bob", at=MON_0900 + timedelta(hours=2))
    skipped = execution(
        s,
        MON_0900,
        state="skipped",
        reason_code="misfire",
        reason="skipped by misfire policy (skip): the occurrence was found 2h00m late, beyond the 60s grace period",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert 'paused by alice at 2026-01-05 08:55 CET ("deploy freeze")' in answer.sentence
    assert answer.sentence.endswith("the misfire policy (skip) recorded this occurrence as skipped")
    assert str(skipped.id) in ids(answer, "execution")


def test_still_paused_through_the_real_services(tenant: Tenant) -> None:
    s = weekday_9am(alice(tenant))
    services.schedule_pause(actor=alice(tenant), schedule_id=s.id, reason="deploy freeze")
    future = datetime(2030, 1, 7, 8, 0, tzinfo=UTC)  # a Monday, 09:00 CET
    answer = explain(schedule=s, at=future, now=services.db_now())
    assert answer.code == "paused"
    assert answer.sentence.startswith("will not run at 2030-01-07 09:00 CET")
    assert "the schedule is paused (by alice since" in answer.sentence
    assert '"deploy freeze") and will not run until it is resumed' in answer.sentence
    audit = AuditEvent.objects.get(action="schedule.pause", object_id=str(s.id))
    assert str(audit.pk) in ids(answer, "audit")


def test_auto_resume_at_the_pause_end_is_told_as_such(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    record_pause(s, by="alice", at=MON_0900 - timedelta(hours=1))
    event(
        s,
        "resumed",
        "resumed automatically: the pause's end time passed",
        MON_0900 + timedelta(hours=1),
        actor="beat",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert "it resumed by itself at 2026-01-05 10:00 CET when the pause ended" in answer.sentence


def test_created_after_that_time(tenant: Tenant) -> None:
    s = weekday_9am(alice(tenant), created=MON_0900 + timedelta(hours=3))
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "not_created_yet"
    assert answer.sentence == (
        "the occurrence at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC) came before the schedule "
        "existed: alice created it at 2026-01-05 12:00 CET (2026-01-05 11:00 UTC)"
    )
    created = AuditEvent.objects.get(action="schedule.create", object_id=str(s.id))
    assert str(created.pk) in ids(answer, "audit")


def test_skipped_by_the_misfire_policy_says_how_late_the_scheduler_was(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(
        s,
        MON_0900,
        state="skipped",
        reason_code="misfire",
        reason="skipped by misfire policy (skip): the occurrence was found 14m00s late, beyond the 60s grace period",
    )
    Execution.objects.filter(pk=e.pk).update(created_at=MON_0900 + timedelta(minutes=14))
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "skipped_misfire"
    assert answer.sentence == (
        "skipped by the misfire policy (skip) at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): the "
        "scheduler only reached it at 2026-01-05 09:14 CET, 14 min 00 s late, beyond the 60 s grace "
        "period (was the scheduler down?)"
    )
    assert ids(answer, "execution") == {str(e.id)}


def test_old_misfires_without_individual_records_are_found_by_their_summary_event(
    tenant: Tenant,
) -> None:
    s = weekday_9am(make_principal(tenant))
    summary = event(
        s,
        "misfire_skipped",
        "1200 older missed occurrences were skipped by the misfire policy (skip) without individual records",
        MON_0900 + timedelta(days=1),
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "skipped_misfire"
    assert "1200 older missed occurrences were skipped" in answer.sentence
    assert ids(answer, "event") == {str(summary.pk)}


def test_skipped_because_the_previous_run_was_still_active(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant), concurrency="forbid")
    previous = execution(
        s, MON_0900 - timedelta(days=3), state="running", started_at=MON_0900 - timedelta(days=3)
    )
    e = execution(
        s,
        MON_0900,
        state="skipped",
        reason_code="overlap_forbid",
        reason=f"skipped: previous run {previous.id} still running (overlap forbid)",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "skipped_overlap"
    assert answer.sentence == (
        "skipped at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): the previous run was still active and "
        f"the schedule forbids overlapping runs (skipped: previous run {previous.id} still running (overlap forbid))"
    )
    assert ids(answer, "execution") == {str(e.id), str(previous.id)}


def test_skipped_because_an_upstream_failed(tenant: Tenant) -> None:
    p = make_principal(tenant)
    upstream = weekday_9am(p, name="nightly-export")
    dependent = weekday_9am(p, name="report", depends_on=[str(upstream.id)])
    dead = execution(upstream, MON_0900, state="dead", started_at=MON_0900, finished_at=MON_0900)
    skipped = execution(
        dependent,
        MON_0900,
        state="skipped",
        reason_code="upstream",
        trigger="dependency",
        reason=f"skipped: upstream nightly-export dead (execution {dead.id})",
    )
    answer = explain(schedule=dependent, at=MON_0900, now=NOW)
    assert answer.code == "skipped_upstream"
    assert answer.sentence == (
        f"skipped at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): upstream nightly-export dead (execution {dead.id})"
    )
    assert ids(answer, "execution") == {str(skipped.id), str(dead.id)}


def test_held_at_the_concurrency_limit_then_ran(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    started = MON_0900 + timedelta(minutes=3, seconds=10)
    e = execution(
        s,
        MON_0900,
        state="succeeded",
        started_at=started,
        finished_at=started + timedelta(seconds=1),
        status_code=204,
    )
    held = event(
        s,
        "held_concurrency",
        "waiting: tenant billing at its concurrency limit 2",
        MON_0900 + timedelta(seconds=1),
        execution=e,
        actor="beat",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "ran"
    assert answer.sentence == (
        "held at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC): tenant billing at its concurrency limit 2 "
        "(from 2026-01-05 09:00:01 CET); it ran at 2026-01-05 09:03:10 CET and succeeded at "
        "2026-01-05 09:03:11 CET (HTTP 204), attempt 1"
    )
    assert str(held.pk) in ids(answer, "event")


def test_held_then_dead_answers_dead(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(
        s,
        MON_0900,
        state="dead",
        attempt=3,
        started_at=MON_0900 + timedelta(minutes=3),
        finished_at=MON_0900 + timedelta(minutes=9),
        reason="HTTP 503 — attempts exhausted (3 of 3)",
    )
    event(
        s,
        "held_concurrency",
        "waiting: tenant billing at its concurrency limit 2",
        MON_0900,
        execution=e,
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "dead"
    assert answer.sentence.startswith("held at 2026-01-05 09:00 CET")
    assert "is dead after 3 attempt(s)" in answer.sentence


def test_still_held_has_not_started(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(
        s,
        MON_0900,
        reason_code="held_capacity",
        reason="waiting: platform at its dispatch capacity",
    )
    event(s, "held_capacity", "waiting: platform at its dispatch capacity", MON_0900, execution=e)
    answer = explain(schedule=s, at=MON_0900, now=MON_0900 + timedelta(minutes=1))
    assert answer.code == "held"
    assert answer.sentence.endswith(
        "platform at its dispatch capacity (since 2026-01-05 09:00 CET); it has not started yet"
    )


def test_cancelled_because_replaced_by_a_newer_occurrence(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant), concurrency="replace")
    e = execution(
        s,
        MON_0900,
        state="cancelled",
        reason_code="replaced",
        started_at=MON_0900,
        finished_at=MON_0900 + timedelta(days=1),
        reason="cancelled: replaced by a newer occurrence (overlap replace)",
    )
    ev = event(
        s,
        "cancelled",
        "cancelled: replaced by a newer occurrence (overlap replace)",
        MON_0900 + timedelta(days=1),
        execution=e,
        actor="beat",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "cancelled"
    assert answer.sentence == (
        "the run for 2026-01-05 09:00 CET (2026-01-05 08:00 UTC) was cancelled at 2026-01-06 09:00 CET "
        "after it had started: cancelled: replaced by a newer occurrence (overlap replace)"
    )
    assert ids(answer, "event") == {str(ev.pk)}


def test_deleted_schedule_explains_later_occurrences(tenant: Tenant) -> None:
    p = alice(tenant)
    s = weekday_9am(p)
    services.schedule_delete(actor=p, schedule_id=s.id)
    s.refresh_from_db()
    later = datetime(2030, 1, 7, 8, 0, tzinfo=UTC)
    answer = explain(schedule=s, at=later, now=services.db_now())
    assert answer.code == "deleted"
    assert answer.sentence.startswith("the schedule was deleted at ")
    deleted = AuditEvent.objects.get(action="schedule.delete", object_id=str(s.id))
    assert str(deleted.pk) in ids(answer, "audit")


def test_future_occurrence_is_pending(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    answer = explain(schedule=s, at=MON_0900, now=MON_0900 - timedelta(hours=1))
    assert answer.code == "pending"
    assert (
        answer.sentence == "not due yet: it will run at 2026-01-05 09:00 CET (2026-01-05 08:00 UTC)"
    )


def test_past_occurrence_the_beat_has_not_reached_yet(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    Schedule.objects.filter(pk=s.pk).update(next_run_at=MON_0900)
    s.refresh_from_db()
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "pending"
    assert "the scheduler has not fired the occurrence" in answer.sentence
    assert "(the beat is behind or down)" in answer.sentence


def test_recorded_but_unpublished_execution_is_pending(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    e = execution(s, MON_0900)
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "pending" and answer.execution_id == str(e.id)
    assert "is recorded but not yet published" in answer.sentence


def test_no_record_at_all_is_reported_as_missing(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    Schedule.objects.filter(pk=s.pk).update(next_run_at=NOW + timedelta(days=1))
    s.refresh_from_db()
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "missing"
    assert "there is no record for the occurrence" in answer.sentence


def test_answers_use_the_definition_in_force_at_that_time(tenant: Tenant) -> None:
    """Changed from 09:00 to 10:00 after the fact: 09:00 that Monday was an
    occurrence then (the audit log keeps the old definition), 10:00 was not."""
    p = alice(tenant)
    s = weekday_9am(p)
    services.schedule_update(
        actor=p, schedule_id=s.id, data={"cron": "0 10 * * 1-5"}, expected_version=None
    )
    s.refresh_from_db()
    e = execution(s, MON_0900, state="succeeded", started_at=MON_0900, finished_at=MON_0900)
    assert explain(schedule=s, at=MON_0900, now=NOW).execution_id == str(e.id)
    answer = explain(schedule=s, at=MON_0900 + timedelta(hours=1), now=NOW)
    assert answer.code == "not_an_occurrence"
    assert "'0 9 * * 1-5'" in answer.sentence


def test_a_manual_run_in_that_minute_is_found(tenant: Tenant) -> None:
    p = alice(tenant)
    s = weekday_9am(p)
    run = services.schedule_trigger(actor=p, schedule_id=s.id)
    answer = explain(schedule=s, at=run.scheduled_for, now=services.db_now())
    assert answer.execution_id == str(run.id)
    assert answer.code == "pending"
    assert "the manual run for" in answer.sentence


def test_one_off_job_outside_its_time(tenant: Tenant) -> None:
    p = make_principal(tenant)
    job, _ = services.job_create(
        actor=p, data={"run_at": datetime(2030, 5, 1, 12, 0, tzinfo=UTC), "target": TARGET}
    )
    answer = explain(schedule=job, at=datetime(2030, 5, 1, 13, 0, tzinfo=UTC), now=NOW)
    assert answer.code == "not_an_occurrence"
    assert "this one-off job runs only at 2030-05-01 12:00 UTC" in answer.sentence
    at_time = explain(schedule=job, at=datetime(2030, 5, 1, 12, 0, 30, tzinfo=UTC), now=NOW)
    assert at_time.code == "pending" and at_time.occurrence == datetime(
        2030, 5, 1, 12, 0, tzinfo=UTC
    )


def test_naive_instants_are_refused(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    with pytest.raises(ValueError, match="timezone-aware"):
        explain(schedule=s, at=datetime(2026, 1, 5, 9, 0), now=NOW)  # noqa: DTZ001


def test_explainer_reads_only_the_schedules_tenant(tenant: Tenant, other_tenant: Tenant) -> None:
    mine = weekday_9am(make_principal(tenant))
    theirs = weekday_9am(make_principal(other_tenant), name="theirs")
    # A forged row pointing at my schedule from another tenant must not count as mine.
    execution_row(mine, MON_0900, tenant=other_tenant, state="succeeded")
    answer = explain(schedule=mine, at=MON_0900, now=NOW)
    assert answer.code != "ran"
    assert explain(schedule=theirs, at=MON_0900, now=NOW).code != "ran"
    assert uuid.UUID(str(mine.id))


@pytest.mark.parametrize(
    ("state", "fields", "code"),
    [
        ("succeeded", {"status_code": 200}, "ran"),
        ("running", {}, "running"),
        ("retry_scheduled", {"error": "HTTP 503"}, "retrying"),
        ("failed", {"error": "HTTP 400"}, "failed"),
        ("timed_out", {"error": "no complete response"}, "timed_out"),
        ("dead", {"reason": "attempts exhausted (3 of 3)"}, "dead"),
    ],
)
def test_each_outcome_of_a_started_run_has_its_own_code(
    tenant: Tenant, state: str, fields: dict[str, Any], code: str
) -> None:
    """A service reading only `code` must tell a dead run from a successful one."""
    s = weekday_9am(make_principal(tenant))
    execution(s, MON_0900, state=state, started_at=MON_0900, finished_at=MON_0900, **fields)
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == code
    assert answer.code in CODES


def test_a_quota_skip_has_its_own_documented_code(tenant: Tenant) -> None:
    s = weekday_9am(make_principal(tenant))
    execution(
        s,
        MON_0900,
        state="skipped",
        reason_code="quota_exhausted",
        reason="skipped: tenant billing is over its quota of 1000 executions per day",
    )
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "skipped_quota" and answer.code in CODES
    assert "over its quota of 1000 executions per day" in answer.sentence


def test_a_future_spring_forward_gap_is_told_in_the_future_tense(tenant: Tenant) -> None:
    s = amsterdam_schedule(make_principal(tenant), "30 2 * * *", name="gap")
    # Asked on 2026-01-06 about 02:30 on 2026-03-29, which will not exist.
    answer = explain(schedule=s, at=datetime(2026, 3, 29, 1, 30, tzinfo=UTC), now=NOW)
    assert answer.code == "dst_shifted"
    assert answer.sentence == (
        "02:30 does not exist on 2026-03-29 in Europe/Amsterdam; runs at 03:00 CEST. "
        "Not due yet: it will run at 2026-03-29 03:00 CEST (2026-03-29 01:00 UTC)"
    )
    assert "did" not in answer.sentence and " ran " not in answer.sentence


def test_a_future_occurrence_inside_a_pause_will_not_run_after_its_end_it_will(
    tenant: Tenant,
) -> None:
    p = alice(tenant)
    s = weekday_9am(p)
    now = services.db_now()
    services.schedule_pause(
        actor=p, schedule_id=s.id, reason="freeze", until=now + timedelta(days=3)
    )
    s.refresh_from_db()
    inside = cron_next(s, now)
    answer = explain(schedule=s, at=inside, now=now)
    assert answer.code == "paused"
    assert answer.sentence.startswith("will not run at ")
    assert (
        "the schedule is paused (by alice since" in answer.sentence
        and '"freeze"' in answer.sentence
    )
    after = cron_next(s, now + timedelta(days=3))
    assert explain(schedule=s, at=after, now=now).code == "pending"


def cron_next(s: Schedule, after: datetime) -> datetime:
    from dispatch.timing import cron

    found = cron.next_after(s.cron, s.timezone, after=after, seed=str(s.id))
    assert found is not None
    return found
