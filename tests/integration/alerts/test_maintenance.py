"""Maintenance windows: alerts are held while the tenant's window is open (an
`alert_held` event each), and sent as one summary when it is over; windows through
the API (one-off and cron), validated, and each tenant's own."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.alerting import decision, maintenance, outbox
from dispatch.models import Alert, AlertChannel, ExecutionEvent, MaintenanceWindow
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule


@pytest.mark.django_db(transaction=True)
def test_alerts_are_held_in_a_window_and_summarised_after(
    admin_principal: Principal, ledger: Ledger, settings: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    tenant = admin_principal.tenant
    AlertChannel.objects.create(
        tenant=tenant, name="hook", kind="webhook", config={"url": ledger.url}
    )
    window = MaintenanceWindow.objects.create(
        tenant=tenant,
        name="db-upgrade",
        starts_at=db_now() - timedelta(minutes=5),
        ends_at=db_now() + timedelta(hours=1),
    )
    dead = []
    for name in ("nightly", "hourly"):
        schedule = make_schedule(
            admin_principal, {"type": "http", "url": "http://127.0.0.1:9/"}, name=name
        )
        execution = execution_row(schedule, db_now() - timedelta(minutes=1), state="dead")
        assert decision.decide(execution_ids=[str(execution.id)]) == 1
        dead.append(execution)

    assert outbox.pump_once() == 2
    assert ledger.requests == []  # held, not sent
    assert set(Alert.objects.values_list("state", "held_by", "attempts")) == {
        ("pending", "db-upgrade", 0)
    }
    held = ExecutionEvent.objects.get(execution=dead[0], kind="alert_held")
    assert "maintenance window db-upgrade" in held.message
    assert outbox.pump_once() == 0  # not due again before the window ends

    MaintenanceWindow.objects.filter(pk=window.pk).update(ends_at=db_now())
    Alert.objects.update(next_attempt_at=db_now())  # the window's end has come
    assert outbox.pump_once() == 2
    [request] = ledger.requests  # one summary for both
    body = json.loads(request["body"])
    assert body["event"] == "alerts.summary"
    assert body["title"] == "2 alerts held during maintenance window db-upgrade"
    assert "nightly: failed" in body["text"] and "hourly: failed" in body["text"]
    assert set(Alert.objects.values_list("state", flat=True)) == {"sent"}
    sent = ExecutionEvent.objects.get(execution=dead[1], kind="alert_sent")
    assert "in the summary of 2" in sent.message


@pytest.mark.django_db
def test_a_cron_window_is_open_for_its_duration(admin_principal: Principal) -> None:
    now = db_now()
    window = MaintenanceWindow.objects.create(
        tenant=admin_principal.tenant, name="nightly", cron="0 2 * * *", duration_s=3600
    )
    at = now.replace(hour=2, minute=30, second=0, microsecond=0)
    opened = maintenance.window_open(window, at)
    assert opened is not None and opened.ends_at == at.replace(hour=3, minute=0)
    assert maintenance.window_open(window, at.replace(hour=3, minute=1)) is None


@pytest.mark.django_db
def test_windows_through_the_api(api: APIClient, outsider_api: APIClient) -> None:
    start, end = db_now() + timedelta(hours=1), db_now() + timedelta(hours=2)
    res = api.post(
        "/v1/maintenance-windows",
        {"name": "upgrade", "starts_at": start.isoformat(), "ends_at": end.isoformat()},
        format="json",
    )
    assert res.status_code == 201, res.content
    wid = res.json()["id"]
    weekly = api.post(
        "/v1/maintenance-windows",
        {
            "name": "weekly",
            "cron": "0 3 * * SUN",
            "timezone": "Europe/Amsterdam",
            "duration_s": 7200,
        },
        format="json",
    )
    assert weekly.status_code == 201, weekly.content
    names = [w["name"] for w in api.get("/v1/maintenance-windows").json()["results"]]
    assert names == ["upgrade", "weekly"]
    assert outsider_api.get("/v1/maintenance-windows").json()["results"] == []
    assert outsider_api.delete(f"/v1/maintenance-windows/{wid}").status_code == 404
    for body, field in [
        ({"name": "x", "starts_at": end.isoformat(), "ends_at": start.isoformat()}, "ends_at"),
        ({"name": "x", "cron": "not cron", "duration_s": 600}, "cron"),
        ({"name": "x", "cron": "0 3 * * *"}, "duration_s"),
        ({"name": "x"}, "starts_at"),
        ({"name": "upgrade", "starts_at": start.isoformat(), "ends_at": end.isoformat()}, "name"),
    ]:
        bad = api.post("/v1/maintenance-windows", body, format="json")
        assert bad.status_code == 400 and field in bad.json()["error"]["detail"], (
            body,
            bad.content,
        )
    assert api.delete(f"/v1/maintenance-windows/{wid}").status_code == 204
    assert api.delete(f"/v1/maintenance-windows/{wid}").status_code == 404
