"""A webhook channel's header secret that HTTP cannot carry (a line break inside it,
or at its end, as a value read from a file often has) is refused naming the header,
and its text reaches nothing: not the `:test` answer, nor the alert's `alert_failed`
event, nor `dispatch_alert.last_error`, nor the audit rows — nor any other row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.alerting import decision, outbox
from dispatch.models import Alert, ExecutionEvent
from tenants.models import AuditEvent
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.rows import execution_row, rows_containing
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cr3t-value"
NEWLINE = (
    "not sent: the value of header X-Token ends in a line break (as a value read from a "
    "file often does): store it without the trailing newline"
)
INJECTED = "not sent: the value of header X-Token contains a line break or NUL"


@pytest.mark.parametrize(
    ("value", "reason"),
    [(f"{SECRET}\r\nX-Evil: 1", INJECTED), (f"{SECRET}\n", NEWLINE)],
    ids=["crlf-inside", "trailing-newline"],
)
def test_a_header_secret_http_cannot_carry_is_refused_without_its_text(
    value: str,
    reason: str,
    api: APIClient,
    admin_principal: Principal,
    ledger: Ledger,
    settings: Any,
    monkeypatch: Any,
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    settings.ALERT_MAX_ATTEMPTS = 1  # the alert gives up at its first try: last_error is final
    monkeypatch.setenv("SCHED_SECRET_BILLING__HOOK_TOKEN", value)
    res = api.post(
        "/v1/alert-channels",
        {
            "name": "hook",
            "kind": "webhook",
            "config": {"url": ledger.url, "headers": {"X-Token": {"secret": "env:HOOK_TOKEN"}}},
        },
        format="json",
    )
    assert res.status_code == 201, res.content
    cid = res.json()["id"]

    answer = api.post(f"/v1/alert-channels/{cid}:test")
    assert answer.status_code == 200
    assert answer.json() == {"ok": False, "detail": reason}
    audit = AuditEvent.objects.get(action="alert_channel.test", object_id=cid)
    assert (audit.outcome, audit.after["detail"]) == ("failed", reason)

    schedule = make_schedule(admin_principal, {"type": "http", "url": "http://127.0.0.1:9/"})
    execution = execution_row(schedule, db_now() - timedelta(minutes=1), state="dead")
    assert decision.decide(execution_ids=[str(execution.id)]) == 1
    assert outbox.pump_once() == 1
    alert = Alert.objects.get(execution_id=execution.id)
    assert (alert.state, alert.last_error) == ("failed", f"webhook hook ({reason})")
    event = ExecutionEvent.objects.get(execution=execution, kind="alert_failed")
    assert (
        event.message
        == f"failure alert try 1 failed: webhook hook ({reason}); gave up after 1 tries"
    )

    assert ledger.requests == []  # nothing went out with a mangled header
    assert rows_containing(SECRET) == {}
