"""Alerts end to end with a real beat and a real worker (separate processes): the
worker's fenced finish decides the alert in its transaction, the beat's control
pump sends it — to a real SMTP server (aiosmtpd) and to a loopback webhook
receiver that verifies the signature. With a threshold of 2: the first failure
is quiet, the second alerts, the next success sends a recovery."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Alert, AlertPolicy, Execution, ExecutionEvent
from tenants.models import Tenant
from tenants.roles import Principal
from tests.integration.alerts.conftest import Mailbox
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, processes, wait_for, worker_cmd
from tests.support.worker_support import ONE_SHOT, make_schedule, purge, worker_log_ready

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def target() -> Iterator[Ledger]:
    """The job's own endpoint (the `ledger` fixture is the alert webhook's receiver)."""
    with Ledger() as target:
        yield target


@pytest.fixture
def platform(
    tmp_path: Path, target: Ledger, ledger: Ledger, smtp_server: Mailbox
) -> Iterator[Callable[..., Proc]]:
    from django.conf import settings

    purge(settings.CELERY_BROKER_URL)
    with processes(tmp_path) as start:
        start(
            "beat",
            beat_cmd("--name", "beat-al", "--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "2"),
            CONTROL_INTERVAL_S="0.2",
            TARGET_TEST_ALLOW=ledger.allow_entry,
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=str(smtp_server.port),
        )
        worker = start(
            "w1",
            worker_cmd(queues="default.short", concurrency=1, name="w1"),
            TARGET_TEST_ALLOW=target.allow_entry,
        )
        wait_for(lambda: worker_log_ready(worker) or not worker.alive(), timeout=30, what="w1")
        assert worker.alive(), worker.output()
        yield start
    purge(settings.CELERY_BROKER_URL)


def run_once(api: APIClient, schedule_id: str) -> Execution:
    res = api.post(f"/v1/schedules/{schedule_id}:trigger")
    assert res.status_code == 202, res.content
    execution = Execution.objects.get(pk=res.json()["id"])
    wait_for(
        lambda: Execution.objects.get(pk=execution.pk).state in {"dead", "succeeded"},
        timeout=60,
        what=f"execution {execution.pk} to finish",
    )
    execution.refresh_from_db()
    return execution


def verified(request: dict[str, Any], tenant: Tenant) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in request["headers"].items()}
    signed = f"{headers['x-signature-timestamp']}.{headers['x-alert-id']}.".encode()
    mac = hmac.new(
        tenant.signing_key.encode(), signed + request["body"].encode(), hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(headers["x-signature"], f"sha256={mac}"), request
    event: dict[str, Any] = json.loads(request["body"])
    assert event["alert_id"] == headers["x-alert-id"]
    return event


def test_failure_after_two_then_recovery_by_email_and_signed_webhook(
    platform: Callable[..., Proc],
    api: APIClient,
    admin_principal: Principal,
    tenant: Tenant,
    target: Ledger,
    ledger: Ledger,
    smtp_server: Mailbox,
    settings: Any,
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]  # the webhook channel's save-time check
    for body in (
        {"name": "mail", "kind": "email", "config": {"to": ["ops@billing.test"]}},
        {"name": "hook", "kind": "webhook", "config": {"url": f"{ledger.url}/alerts"}},
    ):
        assert api.post("/v1/alert-channels", body, format="json").status_code == 201
    AlertPolicy.objects.create(tenant=tenant, failure_threshold=2)
    schedule = make_schedule(
        admin_principal,
        {"type": "http", "url": f"{target.url}/job"},
        retry=ONE_SHOT,
        name="nightly",
    )
    target.respond = lambda req: (500, {}, b"down")

    first = run_once(api, str(schedule.id))
    second = run_once(api, str(schedule.id))
    assert (first.state, second.state) == ("dead", "dead")
    wait_for(lambda: len(smtp_server.received) >= 1, timeout=30, what="the failure email")
    target.respond = lambda req: (200, {}, b"ok")
    third = run_once(api, str(schedule.id))
    assert third.state == "succeeded"
    wait_for(lambda: len(smtp_server.received) >= 2, timeout=30, what="the recovery email")
    wait_for(lambda: len(ledger.requests) >= 2, timeout=30, what="both webhook events")
    # Each tenant's sends run on a sender thread that records the result after the
    # receivers answered.
    wait_for(
        lambda: set(Alert.objects.values_list("state", flat=True)) == {"sent"},
        timeout=30,
        what="both alerts recorded as sent",
    )

    subjects = [message["Subject"] for _, message in smtp_server.received]
    assert subjects == [
        "[scheduler] nightly: 2 consecutive failures",
        "[scheduler] nightly: recovered",
    ]
    assert all(to == ["ops@billing.test"] for to, _ in smtp_server.received)
    events = [verified(req, tenant) for req in ledger.requests]
    assert [(e["event"], e["execution_id"]) for e in events] == [
        ("schedule.failing", str(second.id)),
        ("schedule.recovered", str(third.id)),
    ]
    assert events[0]["consecutive_failures"] == 2 and "HTTP 500" in events[0]["reason"]
    # The first failure was quiet; each alert's delivery is on its execution's timeline.
    assert list(Alert.objects.order_by("scheduled_for").values_list("kind", "state")) == [
        ("failure", "sent"),
        ("recovery", "sent"),
    ]
    assert not ExecutionEvent.objects.filter(execution=first, kind__startswith="alert_").exists()
    for execution in (second, third):
        sent = ExecutionEvent.objects.get(execution=execution, kind="alert_sent")
        assert "email mail" in sent.message and "webhook hook (HTTP 200)" in sent.message


def test_the_breaker_pauses_after_k_failures_and_a_resume_clears_it(
    platform: Callable[..., Proc],
    api: APIClient,
    admin_principal: Principal,
    tenant: Tenant,
    target: Ledger,
    smtp_server: Mailbox,
) -> None:
    assert (
        api.post(
            "/v1/alert-channels",
            {"name": "mail", "kind": "email", "config": {"to": ["ops@billing.test"]}},
            format="json",
        ).status_code
        == 201
    )
    schedule = make_schedule(
        admin_principal, {"type": "http", "url": f"{target.url}/job"}, retry=ONE_SHOT, name="etl"
    )
    res = api.put(
        f"/v1/schedules/{schedule.id}/alert-policy",
        {"failure_threshold": 100, "auto_pause_after": 2},
        format="json",
    )
    assert res.status_code == 200, res.content
    target.respond = lambda req: (500, {}, b"down")

    run_once(api, str(schedule.id))
    schedule.refresh_from_db()
    assert not schedule.paused
    tripped = run_once(api, str(schedule.id))
    schedule.refresh_from_db()
    assert schedule.paused and schedule.paused_by == "alerts (auto-pause)"
    assert schedule.paused_reason.startswith(
        "auto-paused after 2 consecutive failures; last error: HTTP 500"
    )
    wait_for(lambda: smtp_server.received, timeout=30, what="the auto-pause email")
    [(_, message)] = smtp_server.received
    assert message["Subject"] == "[scheduler] etl: auto-paused"
    assert "stays paused until someone resumes it" in message.get_payload()
    assert ExecutionEvent.objects.get(execution=tripped, kind="paused").data["auto"] is True
    # The schedule page shows it paused: the API says so too.
    assert api.get(f"/v1/schedules/{schedule.id}").json()["paused"] is True

    # A person resumes it: the breaker starts counting afresh.
    assert api.post(f"/v1/schedules/{schedule.id}:resume").status_code == 200
    run_once(api, str(schedule.id))
    schedule.refresh_from_db()
    assert not schedule.paused
    assert list(Alert.objects.filter(schedule=schedule).values_list("kind", flat=True)) == [
        "auto_paused"
    ]


def test_an_occurrence_held_by_the_concurrency_cap_alerts_late_with_the_reason(
    platform: Callable[..., Proc],
    api: APIClient,
    admin_principal: Principal,
    tenant: Tenant,
    target: Ledger,
    ledger: Ledger,
    settings: Any,
) -> None:
    import threading

    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    assert (
        api.post(
            "/v1/alert-channels",
            {"name": "hook", "kind": "webhook", "config": {"url": f"{ledger.url}/alerts"}},
            format="json",
        ).status_code
        == 201
    )
    assert api.put("/v1/alert-policy", {"late_after_s": 1}, format="json").status_code == 200
    tenant.quota.max_concurrent = 1
    tenant.quota.save()
    release = threading.Event()

    def hold(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        release.wait(60)
        return 200, {}, b"ok"

    target.respond = hold
    try:
        busy = make_schedule(
            admin_principal, {"type": "http", "url": f"{target.url}/slow"}, retry=ONE_SHOT
        )
        res = api.post(f"/v1/schedules/{busy.id}:trigger")
        assert res.status_code == 202, res.content
        wait_for(lambda: target.requests, timeout=30, what="the slow job to start")
        # A one-off job due now: the beat holds it at the tenant's limit of 1.
        job = api.post(
            "/v1/jobs",
            {"name": "held-job", "target": {"type": "http", "url": "https://billing.internal/x"}},
            format="json",
        )
        assert job.status_code == 201, job.content
        wait_for(lambda: ledger.requests, timeout=60, what="the late alert")
    finally:
        release.set()
    [request] = ledger.requests[:1]
    event = verified(request, tenant)
    assert (event["event"], event["schedule_name"], event["late"]) == (
        "schedule.late",
        "held-job",
        "not_started",
    )
    assert "has not started 1 s after its due time" in event["text"], event
    assert "concurrency" in event["why"], event["why"]
    # The receiver answered; the sender's thread records the result just after.
    wait_for(
        lambda: Alert.objects.get(kind="late").state == "sent", timeout=30, what="the alert sent"
    )
    [alert] = Alert.objects.filter(kind="late")
    assert alert.payload["late"] == "not_started"
