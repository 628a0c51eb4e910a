"""The dead-execution notice: email and webhook, once, and never to a forbidden address."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail

from dispatch.models import AlertChannel, Execution, ExecutionEvent
from dispatch.worker import alerts
from tenants.roles import Principal
from tests.support.worker_support import make_execution, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}


def dead(principal: Principal) -> Execution:
    execution = make_execution(make_schedule(principal, TARGET))
    Execution.objects.filter(pk=execution.pk).update(
        state="dead",
        attempt=3,
        reason_code="http_500",
        reason="HTTP 500 — attempts exhausted (3 of 3)",
    )
    return execution


def test_email_notice_is_sent_once(admin_principal: Principal, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    tenant = admin_principal.tenant
    tenant.alert_email = "ops@billing.test"
    tenant.save(update_fields=["alert_email"])
    execution = dead(admin_principal)

    assert alerts.send_dead_notice(execution_id=str(execution.id)) == ["email"]
    assert alerts.send_dead_notice(execution_id=str(execution.id)) == []  # redelivered task
    [message] = mail.outbox
    assert message.to == ["ops@billing.test"]
    assert str(execution.id) in message.body and "attempts exhausted" in message.body
    assert ExecutionEvent.objects.filter(execution=execution, kind="alert_sent").count() == 1


def test_webhook_to_a_forbidden_address_is_not_called(admin_principal: Principal) -> None:
    tenant = admin_principal.tenant
    tenant.alert_webhook_url = "http://169.254.169.254/latest/alert"
    tenant.save(update_fields=["alert_webhook_url"])
    execution = dead(admin_principal)

    assert alerts.send_dead_notice(execution_id=str(execution.id)) == []
    event = ExecutionEvent.objects.get(execution=execution, kind="alert_failed")
    assert "metadata" in event.message


def test_no_notice_for_an_execution_that_is_not_dead(admin_principal: Principal) -> None:
    tenant = admin_principal.tenant
    tenant.alert_email = "ops@billing.test"
    tenant.save(update_fields=["alert_email"])
    execution = make_execution(make_schedule(admin_principal, TARGET))
    assert alerts.send_dead_notice(execution_id=str(execution.id)) == []


def test_a_tenant_with_an_alert_channel_gets_no_second_notice(
    admin_principal: Principal, settings: Any
) -> None:
    """Channels supersede the tenant's own address: the outbox's failure alert is the
    one notice, not this one as well."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    tenant = admin_principal.tenant
    tenant.alert_email = "ops@billing.test"
    tenant.save(update_fields=["alert_email"])
    AlertChannel.objects.create(
        tenant=tenant, name="oncall", kind="email", config={"to": ["oncall@billing.test"]}
    )
    execution = dead(admin_principal)

    assert alerts.send_dead_notice(execution_id=str(execution.id)) == []
    assert mail.outbox == []
    assert not ExecutionEvent.objects.filter(execution=execution).exists()

    AlertChannel.objects.filter(tenant=tenant).update(enabled=False)
    assert alerts.send_dead_notice(execution_id=str(execution.id)) == ["email"]
