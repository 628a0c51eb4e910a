"""Re-test of the tenant-isolation fixes from the attacker's side: the vectors the
re-test found still open, against a real worker, broker and loopback target.

1. On RabbitMQ, beats publish to the priority queues `dispatch.short` /
   `dispatch.long` (config/celery_app.py `amqp_queue`), which platform workers
   consume. A tenant named `dispatch` owns the namespace `dispatch.`, so its queue
   target `{"routing_key": "dispatch.short"}` (default exchange) was accepted at save
   and published into the platform's own queue (seen on a real RabbitMQ: the worker
   logged "Received and deleted unknown message").
2. A secret echoed by a target in JSON with an escaped slash (`\\/`, as PHP's
   json_encode writes it) or with HTML numeric character references (`&#43;`, as
   Go's html/template writes `+`; `&#x2F;`, as OWASP encoders write `/`) was stored
   in the execution's `log_excerpt`, where every viewer of the tenant reads it.
3. Managed commands: OpenSSL's and less's steering variables could be declared in
   the admin and set by a tenant: OPENSSL_CONF / OPENSSL_ENGINES / OPENSSL_MODULES
   make every OpenSSL-linked program load the configuration or shared objects they
   name, LESSOPEN makes `less` run a command. Seen in a real run: both reached the
   sandboxed command's environment with the tenant's value.
"""

from __future__ import annotations

import html
import json
import os
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from kombu import Connection, Queue
from rest_framework.test import APIClient

from config.celery_app import amqp_queue
from dispatch.models import ManagedCommand, Priority
from dispatch.worker import vault as secret_backends
from tenants.models import Tenant, TenantQuota
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.ledger import Ledger, Respond
from tests.support.procs import Proc
from tests.support.worker_support import (
    run_to_end,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# Long enough for the derived forms, with the characters the encoders rewrite.
SECRET = f"echo/{os.urandom(6).hex()}+k=v/Q"
DURATIONS = ("short", "long")


def rabbitmq_priority_queues() -> list[str]:
    """The queues a RabbitMQ worker consumes for the platform's `{priority}.{duration}` queues."""
    names = {amqp_queue(f"{p}.{d}")[0].name for p in Priority.values for d in DURATIONS}
    return sorted(names)


def careless_echoes(value: str) -> dict[str, str]:
    """Spellings of the secret ordinary encoders produce when a target reflects it."""
    return {
        "json, escaped slash": json.dumps(value).replace("/", "\\/")[1:-1],
        "html, &#43; for +": html.escape(value).replace("+", "&#43;"),
        "html, &#x2F; for /": html.escape(value).replace("/", "&#x2F;"),
    }


def echo(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    sent = req["headers"].get("Authorization", "")
    lines = [f"raw <{sent}>"] + [f"{k} <{v}>" for k, v in careless_echoes(sent).items()]
    return 200, {}, "\n".join(lines).encode()


@pytest.fixture(scope="module")
def ledger_respond() -> Respond:
    return echo


@pytest.fixture(scope="module")
def worker_settings(module_ledger: Ledger) -> dict[str, Any]:
    return {
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
        "SECRETS_BACKEND": "env",
        secret_backends.env_name("billing", "ECHO"): SECRET,
    }


def waiting(name: str) -> int:
    with Connection(settings.CELERY_BROKER_URL) as conn:
        return int(Queue(name, durable=True)(conn.default_channel).queue_declare().message_count)


@pytest.mark.parametrize("queue", rabbitmq_priority_queues())
def test_no_tenant_can_take_the_namespace_of_a_rabbitmq_priority_queue(queue: str) -> None:
    slug = queue.split(".")[0]
    with pytest.raises(CommandError):
        call_command("create_tenant", slug, stdout=StringIO())
    assert not Tenant.objects.filter(slug=slug).exists()


@pytest.mark.parametrize("queue", rabbitmq_priority_queues())
def test_a_tenant_named_like_a_priority_queue_publishes_nothing_into_it(
    worker: Proc, queue: str
) -> None:
    # As if created before its slug was refused: straight into the table.
    legacy = Tenant.objects.create(slug=queue.split(".")[0], name="legacy")
    TenantQuota.objects.create(tenant=legacy)
    with Connection(settings.CELERY_BROKER_URL) as conn:
        Queue(queue, durable=True)(conn.default_channel).declare()
        conn.default_channel.queue_purge(queue)
    target = {"type": "queue", "broker": "default", "exchange": "", "routing_key": queue}
    execution = run_to_end(make_principal(legacy), target | {"body": {"task": "x"}})
    published = waiting(queue)
    with Connection(settings.CELERY_BROKER_URL) as conn:
        conn.default_channel.queue_purge(queue)
    assert execution.state == "dead" and execution.reason_code == "namespace", execution.error
    assert published == 0


def test_json_and_html_escaped_echoes_of_a_secret_are_redacted(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    target = {
        "type": "http",
        "method": "GET",
        "url": f"{module_ledger.url}/echo",
        "headers": {"Authorization": {"secret": "env:ECHO"}},
    }
    execution = run_to_end(admin_principal, target)
    assert execution.state == "succeeded", execution.error
    assert module_ledger.requests[-1]["headers"]["Authorization"] == SECRET  # it was sent
    excerpt = execution.log_excerpt
    assert "raw <[redacted]>" in excerpt, excerpt  # the control: redaction ran
    leaked = {k: v for k, v in careless_echoes(SECRET).items() if v in excerpt}
    assert leaked == {}, excerpt


STEERING = ["OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "LESSOPEN"]


@pytest.mark.parametrize("name", STEERING)
def test_loader_steering_variables_cannot_be_declared_or_set(
    admin_client: Any, api: APIClient, name: str
) -> None:
    form = {
        "name": "probe",
        "argv": '["/usr/bin/openssl", "version"]',
        "timeout_s": "60",
        "enabled": "on",
        "env": json.dumps([name]),
        "readable_paths": "[]",
        "writable_paths": "[]",
        "cpu_s": "60",
        "memory_mb": "256",
        "max_procs": "16",
    }
    res = admin_client.post("/admin/dispatch/managedcommand/add/", form)
    assert res.status_code == 200, "the admin saved a registration declaring " + name
    assert name in res.context["adminform"].form.errors["env"][0]
    # A registration written straight into the table: the tenant still may not set it.
    ManagedCommand.objects.create(name="probe", argv=["/usr/bin/openssl", "version"], env=[name])
    body = {
        "name": "probe-nightly",
        "cron": "0 2 * * *",
        "target": {"type": "command", "command": "probe", "env": {name: {"secret": "env:X"}}},
    }
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 400, res.content
    assert f"target.env.{name}" in res.json()["error"]["detail"]
