"""The alert decision (dispatch/sql/alerts.sql `alert_decide`) on real rows: the
Nth consecutive failure, cancellations and skips neither counting nor breaking a
streak, re-alerts after realert_s, recovery once, one alert per (occurrence, kind),
and nothing for a tenant without an enabled channel."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from dispatch.alerting import decision
from dispatch.models import (
    Alert,
    AlertChannel,
    AlertPolicy,
    Execution,
    ExecutionEvent,
    Schedule,
)
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}


@pytest.fixture
def schedule(admin_principal: Principal) -> Schedule:
    AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="mail", kind="email", config={"to": ["o@b.test"]}
    )
    return make_schedule(admin_principal, TARGET)


class Occurrences:
    """Finished occurrences of one schedule, an hour apart, each decided as it ends."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.at: datetime = db_now() - timedelta(days=1)

    def end(self, state: str, **fields: Any) -> Execution:
        self.at += timedelta(hours=1)
        execution = execution_row(
            self.schedule, self.at, state=state, reason="HTTP 500 — attempts exhausted", **fields
        )
        decision.decide(execution_ids=[str(execution.id)])
        return execution


def alerts(schedule: Schedule) -> list[tuple[str, datetime]]:
    return list(
        Alert.objects.filter(schedule=schedule)
        .order_by("scheduled_for", "kind")
        .values_list("kind", "scheduled_for")
    )


def test_the_nth_consecutive_failure_alerts_once(schedule: Schedule) -> None:
    AlertPolicy.objects.create(tenant=schedule.tenant, schedule=schedule, failure_threshold=3)
    runs = Occurrences(schedule)
    runs.end("dead")
    runs.end("cancelled")  # neither counts nor breaks the streak
    runs.end("dead")
    runs.end("skipped")
    assert alerts(schedule) == []
    third = runs.end("dead")
    fourth = runs.end("dead")  # still failing, no re-alert configured
    assert alerts(schedule) == [("failure", third.scheduled_for)]
    alert = Alert.objects.get(schedule=schedule)
    assert alert.payload["consecutive_failures"] == 3 and alert.state == "pending"
    assert alert.execution_id == third.id and fourth.id != third.id
    # Deciding the same execution again changes nothing (redelivered finish, sweep).
    assert decision.decide(execution_ids=[str(third.id)]) == 0


def test_a_success_breaks_the_streak_and_recovers_once(schedule: Schedule) -> None:
    runs = Occurrences(schedule)  # tenant default: threshold 1, recovery on
    first = runs.end("dead")
    runs.end("dead")
    recovered = runs.end("succeeded")
    runs.end("succeeded")  # no second recovery
    again = runs.end("timed_out")
    assert alerts(schedule) == [
        ("failure", first.scheduled_for),
        ("recovery", recovered.scheduled_for),
        ("failure", again.scheduled_for),
    ]


def test_recovery_off_and_realert(schedule: Schedule) -> None:
    AlertPolicy.objects.create(tenant=schedule.tenant, recovery=False, realert_s=3600)
    runs = Occurrences(schedule)
    first = runs.end("dead")
    runs.end("dead")  # within realert_s of the first alert: nothing
    Alert.objects.filter(schedule=schedule).update(created_at=db_now() - timedelta(hours=2))
    third = runs.end("dead")  # the last failure alert is older than realert_s
    runs.end("succeeded")  # recovery off
    assert alerts(schedule) == [("failure", first.scheduled_for), ("failure", third.scheduled_for)]


def test_the_schedule_override_wins_over_the_tenant_default(schedule: Schedule) -> None:
    AlertPolicy.objects.create(tenant=schedule.tenant, failure_threshold=5)
    AlertPolicy.objects.create(tenant=schedule.tenant, schedule=schedule, failure_threshold=1)
    first = Occurrences(schedule).end("dead")
    assert alerts(schedule) == [("failure", first.scheduled_for)]


def test_no_alert_without_an_enabled_channel(schedule: Schedule) -> None:
    AlertChannel.objects.filter(tenant=schedule.tenant).update(enabled=False)
    Occurrences(schedule).end("dead")
    assert alerts(schedule) == []


def test_the_breaker_pauses_after_k_failures_alerts_once_and_restarts_after_a_resume(
    schedule: Schedule, admin_principal: Principal
) -> None:
    from dispatch import services

    AlertPolicy.objects.create(tenant=schedule.tenant, failure_threshold=10, auto_pause_after=3)
    runs = Occurrences(schedule)
    runs.end("dead")
    runs.end("cancelled")  # cancellations and skips do not count (nor break the streak)
    runs.end("skipped")
    runs.end("dead")
    schedule.refresh_from_db()
    assert not schedule.paused
    third = runs.end("dead")
    schedule.refresh_from_db()
    assert schedule.paused and schedule.paused_until is None
    assert schedule.paused_by == "alerts (auto-pause)"
    assert schedule.paused_reason == (
        "auto-paused after 3 consecutive failures; last error: HTTP 500 — attempts exhausted"
    )
    assert alerts(schedule) == [("auto_paused", third.scheduled_for)]
    note = ExecutionEvent.objects.get(execution=third, kind="paused")
    assert note.data["auto"] is True and note.actor == "alerts (auto-pause)"
    runs.end("dead")  # an execution already under way when it paused: no second alert
    assert len(alerts(schedule)) == 1

    services.schedule_resume(actor=admin_principal, schedule_id=schedule.id)
    runs.end("dead")
    schedule.refresh_from_db()
    # Two failures after the occurrence that tripped it (the one under way, this one):
    # the failures before the trip no longer count.
    assert not schedule.paused
    again = runs.end("dead")
    schedule.refresh_from_db()
    assert schedule.paused
    assert alerts(schedule)[-1] == ("auto_paused", again.scheduled_for)


def test_a_snoozed_schedule_sends_nothing_but_still_counts(schedule: Schedule) -> None:
    AlertPolicy.objects.create(tenant=schedule.tenant, failure_threshold=2)
    Schedule.objects.filter(pk=schedule.pk).update(
        alert_snoozed_until=db_now() + timedelta(hours=1)
    )
    runs = Occurrences(schedule)
    runs.end("dead")
    runs.end("dead")  # the 2nd: owed, but snoozed
    assert alerts(schedule) == []
    Schedule.objects.filter(pk=schedule.pk).update(
        alert_snoozed_until=db_now() - timedelta(minutes=1)
    )  # the snooze is over
    runs.end("dead")  # the streak went on (3 >= 2): the alert it owed is not sent late
    assert alerts(schedule) == []
    runs.end("succeeded")  # no recovery either: no failure alert went out
    runs.end("dead")
    second = runs.end("dead")
    assert alerts(schedule) == [("failure", second.scheduled_for)]
