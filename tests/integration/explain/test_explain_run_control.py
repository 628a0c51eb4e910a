"""The explainer on run control: who cancelled (when, why), who re-ran (when, which
attempt), which backfill created a run — from the structured fields of the rows
and events the services wrote, never from their wording."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatch import services
from dispatch.explain import as_json, explain
from dispatch.explain.present import clock
from dispatch.models import Backfill, Execution, ExecutionEvent
from dispatch.timing import cron
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.support.explain_support import amsterdam_schedule
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

# Monday 2026-01-05, 09:00 in Amsterdam (CET, UTC+1) is 08:00 UTC.
MON_0900 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
AMS = cron.get_zone("Europe/Amsterdam")


def actor(tenant: Tenant, label: str) -> Principal:
    return Principal(
        tenant=tenant, role=Role.OPERATOR, actor_kind="user", actor_id=label, label=label
    )


def test_cancelled_by_a_user_names_who_when_and_why(tenant: Tenant) -> None:
    ops = actor(tenant, "user:ops-lead")
    schedule = amsterdam_schedule(ops, "0 9 * * 1-5", name="morning")
    run = execution_row(schedule, MON_0900, state="running", started_at=MON_0900)
    services.execution_cancel(actor=ops, execution_id=run.id, reason="deploy freeze")
    cancelled = ExecutionEvent.objects.get(execution=run, kind="cancelled")

    answer = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert answer.code == "cancelled"
    assert (
        f"was cancelled by ops-lead at {clock(cancelled.at, AMS)} (deploy freeze) "
        "after it had started"
    ) in answer.sentence
    assert {"kind": "event", "id": str(cancelled.pk), "label": cancelled.message} in as_json(
        answer
    )["evidence"]


def test_cancel_without_a_reason_says_who_and_when_only(tenant: Tenant) -> None:
    ops = actor(tenant, "user:ops-lead")
    schedule = amsterdam_schedule(ops, "0 9 * * 1-5", name="morning")
    run = execution_row(schedule, MON_0900, state="queued")
    services.execution_cancel(actor=ops, execution_id=run.id)
    at = ExecutionEvent.objects.get(execution=run, kind="cancelled").at
    answer = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert answer.sentence.endswith(f"was cancelled by ops-lead at {clock(at, AMS)}")


def test_rerun_names_who_when_and_the_attempt(tenant: Tenant) -> None:
    ops = actor(tenant, "user:ops-lead")
    bot = actor(tenant, "deploy-bot")
    schedule = amsterdam_schedule(ops, "0 9 * * 1-5", name="morning")
    run = execution_row(
        schedule,
        MON_0900,
        state="dead",
        attempt=3,
        started_at=MON_0900,
        finished_at=MON_0900 + timedelta(minutes=2),
        reason="HTTP 500 — attempts exhausted (3 of 3)",
    )
    services.execution_rerun(actor=bot, execution_id=run.id)
    rerun = ExecutionEvent.objects.get(execution=run, kind="rerun")

    pending = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert pending.code == "pending"
    assert pending.sentence.endswith(
        f"; re-run by deploy-bot at {clock(rerun.at, AMS)} (attempt 4)"
    )

    # The re-run's chain died after one attempt of its own (attempt 4 of the row).
    Execution.objects.filter(pk=run.pk).update(
        state="dead",
        attempt=4,
        started_at=services.db_now(),
        finished_at=services.db_now(),
        reason="HTTP 500 — not retryable",
    )
    dead = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert dead.code == "dead"
    assert "is dead after 1 attempt(s)" in dead.sentence
    assert "re-run by deploy-bot" in dead.sentence and "(attempt 4)" in dead.sentence


def test_rerun_with_an_edited_target_says_so(tenant: Tenant) -> None:
    bot = actor(tenant, "deploy-bot")
    schedule = amsterdam_schedule(bot, "0 9 * * 1-5", name="morning")
    run = execution_row(schedule, MON_0900, state="succeeded", finished_at=MON_0900)
    edited = dict(schedule.target) | {"body": {"replay": True}}
    services.execution_rerun(actor=bot, execution_id=run.id, target=edited)
    answer = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert "(attempt 2, with an edited target)" in answer.sentence


def test_backfill_run_names_its_backfill_and_day(tenant: Tenant) -> None:
    ops = actor(tenant, "user:ops-lead")
    schedule = amsterdam_schedule(ops, "0 9 * * 1-5", name="morning")
    backfill = Backfill.objects.create(
        tenant=tenant,
        schedule=schedule,
        range_from=MON_0900,
        range_to=MON_0900 + timedelta(days=7),
        created_by="user:ops-lead",
    )
    execution_row(
        schedule,
        MON_0900,
        trigger="backfill",
        backfill=backfill,
        state="succeeded",
        status_code=200,
        started_at=services.db_now(),
        finished_at=services.db_now(),
    )
    backfill.refresh_from_db()
    answer = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert answer.code == "ran"
    assert answer.sentence.endswith(
        f"; created by backfill {backfill.id} on {backfill.created_at.astimezone(AMS):%Y-%m-%d}"
    )
    link = {"kind": "backfill", "id": str(backfill.id)}
    assert any(link.items() <= e.items() for e in as_json(answer)["evidence"])
    assert f"/v1/backfills/{backfill.id}" in {e.get("url") for e in as_json(answer)["evidence"]}


def test_replace_cancel_keeps_its_own_wording(tenant: Tenant) -> None:
    # Not a user's cancel: the platform's reason stays the answer.
    ops = actor(tenant, "user:ops-lead")
    schedule = amsterdam_schedule(ops, "0 9 * * 1-5", name="morning")
    execution_row(
        schedule,
        MON_0900,
        state="cancelled",
        reason_code="replaced",
        reason="cancelled: replaced by a newer occurrence (overlap replace)",
        finished_at=MON_0900 + timedelta(minutes=1),
    )
    answer = explain(schedule=schedule, at=MON_0900, now=services.db_now())
    assert answer.sentence.endswith(": cancelled: replaced by a newer occurrence (overlap replace)")
    assert "cancelled by" not in answer.sentence
