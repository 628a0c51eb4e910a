"""The beat's decisions name the records they are about by id (`ExecutionEvent.data`),
and the explainer follows those ids: an overlap `replace` cancellation names the
run that replaced it, an automatic resume names the audit row it wrote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.explain import explain
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler.loop import Beat
from dispatch.states import EventData, EventKind
from tenants.models import AuditEvent
from tenants.roles import Principal
from tests.support.explain_support import ids
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
MON_0900 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # 09:00 CET
NOW = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "links-beat", "cycle_s": 0.2}


def test_a_replace_cancellation_names_the_run_that_replaced_it(
    beat: Beat, admin_principal: Principal
) -> None:
    # An hourly cron at this minute: the occurrence at its start is due, the next an
    # hour away (outside the lookahead), whatever second the test starts at.
    s = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "r",
            "cron": f"{db_now().minute} * * * *",
            "target": TARGET,
            "misfire_grace_s": 600,
            "concurrency": "replace",
        },
    )
    Schedule.objects.filter(pk=s.pk).update(created_at=db_now() - timedelta(days=1))
    minute = db_now().replace(second=0, microsecond=0)
    old = execution_row(s, minute - timedelta(hours=1), state="running", fencing_token=4)
    Schedule.objects.filter(pk=s.pk).update(next_run_at=minute)
    beat.cycle()
    new = Execution.objects.exclude(pk=old.pk).get(schedule=s)
    assert Execution.objects.get(pk=old.pk).state == "cancelled"
    cancelled = ExecutionEvent.objects.get(execution=old, kind=EventKind.CANCELLED)
    assert cancelled.data[EventData.RELATED_EXECUTION_ID] == str(new.pk)
    # A decoy: another run of the schedule, later than the replacer. Only the id
    # leads to the right one.
    execution_row(s, db_now() + timedelta(hours=1))
    s.refresh_from_db()
    answer = explain(schedule=s, at=old.scheduled_for, now=db_now())
    assert answer.code == "cancelled"
    assert str(new.pk) in ids(answer, "execution")


def test_an_automatic_resume_names_the_audit_row_it_wrote_and_the_explainer_follows_it(
    beat: Beat, admin_principal: Principal
) -> None:
    s = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "morning",
            "cron": "0 9 * * 1-5",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    Schedule.objects.filter(pk=s.pk).update(created_at=datetime(2025, 12, 1, tzinfo=UTC))
    services.schedule_pause(
        actor=admin_principal,
        schedule_id=s.id,
        reason="freeze",
        until=db_now() + timedelta(hours=1),
    )
    # The pause's end has passed (the service refuses an end in the past, so set it here).
    Schedule.objects.filter(pk=s.pk).update(paused_until=db_now() - timedelta(seconds=1))
    beat._last_sweep = 0
    beat.cycle()
    resumed = ExecutionEvent.objects.get(schedule=s, kind=EventKind.RESUMED)
    audit = AuditEvent.objects.get(action="schedule.resume", object_id=str(s.id))
    assert resumed.actor == "beat" and audit.actor_label == "beat"
    assert resumed.data[EventData.AUDIT_ID] == audit.pk
    assert audit.at <= resumed.at  # the audit row is written first
    # Move the pause around Monday 09:00 and put a decoy audit row of the same action
    # and actor right after the resumed event: a rule by time would take the decoy.
    paused = ExecutionEvent.objects.get(schedule=s, kind=EventKind.PAUSED)
    ExecutionEvent.objects.filter(pk=paused.pk).update(at=MON_0900 - timedelta(minutes=5))
    ExecutionEvent.objects.filter(pk=resumed.pk).update(at=MON_0900 + timedelta(minutes=20))
    decoy = AuditEvent.objects.create(
        tenant_id=s.tenant_id,
        at=MON_0900 + timedelta(minutes=20),
        actor_kind="system",
        actor_label="beat",
        action="schedule.resume",
        object_type="schedule",
        object_id=str(s.id),
    )
    s.refresh_from_db()
    answer = explain(schedule=s, at=MON_0900, now=NOW)
    assert answer.code == "paused"
    assert "it resumed by itself at 2026-01-05 09:20 CET when the pause ended" in answer.sentence
    found = ids(answer, "audit")
    assert str(audit.pk) in found and str(decoy.pk) not in found
