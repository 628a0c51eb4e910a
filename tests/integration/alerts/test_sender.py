"""The outbox sender (dispatch/alerting/outbox.py) on this thread's connection:
retries with backoff, recording each attempt on the execution's timeline, sending
a retry only to the channels that did not take the alert, giving up after
ALERT_MAX_ATTEMPTS, and taking up again an alert whose sender died after claiming it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from dispatch.alerting import decision, outbox
from dispatch.models import Alert, AlertChannel, Execution, ExecutionEvent
from dispatch.sql import sql
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dead(admin_principal: Principal, ledger: Ledger, settings: Any) -> Execution:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    settings.ALERT_RETRY_INITIAL_S = 0  # due again at once: the test pumps by hand
    AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="hook", kind="webhook", config={"url": ledger.url}
    )
    schedule = make_schedule(admin_principal, {"type": "http", "url": "http://127.0.0.1:9/"})
    execution = execution_row(schedule, db_now() - timedelta(minutes=1), state="dead")
    assert decision.decide(execution_ids=[str(execution.id)]) == 1
    return execution


def timeline(execution: Execution) -> list[tuple[str, str]]:
    return list(
        ExecutionEvent.objects.filter(execution=execution, kind__startswith="alert_")
        .order_by("id")
        .values_list("kind", "message")
    )


def test_a_failed_delivery_is_retried_and_recorded(dead: Execution, ledger: Ledger) -> None:
    ledger.respond = lambda req: (503, {}, b"busy")
    assert outbox.pump_once() == 1
    alert = Alert.objects.get(execution_id=dead.id)
    assert (alert.state, alert.attempts, alert.delivered) == ("pending", 1, [])
    ledger.respond = lambda req: (200, {}, b"ok")
    assert outbox.pump_once() == 1
    alert.refresh_from_db()
    assert (alert.state, alert.attempts) == ("sent", 2) and alert.sent_at is not None
    assert outbox.pump_once() == 0  # nothing left
    [(k1, m1), (k2, m2)] = timeline(dead)
    assert (k1, k2) == ("alert_failed", "alert_sent")
    assert "HTTP 503" in m1 and "next try" in m1 and "HTTP 200" in m2
    # Both tries carried the alert's own id: a receiver can dedupe a retry.
    ids = {req["headers"]["X-Alert-Id"] for req in ledger.requests}
    assert ids == {str(alert.id)}
    assert json.loads(ledger.requests[-1]["body"])["event"] == "schedule.failing"


def test_a_retry_skips_the_channels_that_took_it(
    dead: Execution, ledger: Ledger, settings: Any
) -> None:
    AlertChannel.objects.create(
        tenant=dead.tenant, name="chat", kind="slack", config={"url": f"{ledger.url}/chat"}
    )
    # The webhook (path "/") fails once; the Slack channel ("/chat") always works.
    answers = iter([(500, {}, b"no")])
    ledger.respond = lambda req: (
        next(answers, (200, {}, b"ok")) if req["path"] == "/" else (200, {}, b"ok")
    )
    outbox.pump_once()
    outbox.pump_once()
    paths = [req["path"] for req in ledger.requests]
    assert sorted(paths) == ["/", "/", "/chat"], paths
    assert Alert.objects.get(execution_id=dead.id).state == "sent"


def test_it_gives_up_after_the_last_attempt(dead: Execution, ledger: Ledger, settings: Any) -> None:
    settings.ALERT_MAX_ATTEMPTS = 2
    ledger.respond = lambda req: (500, {}, b"no")
    outbox.pump_once()
    outbox.pump_once()
    assert outbox.pump_once() == 0
    alert = Alert.objects.get(execution_id=dead.id)
    assert (alert.state, alert.attempts) == ("failed", 2) and "HTTP 500" in alert.last_error
    assert "gave up after 2 tries" in timeline(dead)[-1][1]


def test_an_alert_claimed_by_a_sender_that_died_is_sent_later(
    dead: Execution, ledger: Ledger
) -> None:
    # A sender claims the alert and dies before sending: its claim commits first.
    [claimed] = sql.rows(
        "alert_claim",
        {"busy": [], "tenants": 10, "per_tenant": 10, "lease_s": 3600, "send_s": 5},
    )
    assert outbox.pump_once() == 0  # another sender leaves it alone while the lease runs
    assert ledger.requests == []
    Alert.objects.filter(pk=claimed.id).update(next_attempt_at=db_now())  # the lease lapsed
    assert outbox.pump_once() == 1
    assert len(ledger.requests) == 1
    assert Alert.objects.get(pk=claimed.id).state == "sent"
