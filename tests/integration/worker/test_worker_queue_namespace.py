"""Queue targets stay in the tenant's namespace at run time too: a row edited outside
the API (or a tenant whose slug predates the reserved names) is refused by the
worker before anything is published — checked on the real broker's queues."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Queue

from tenants.models import Tenant, TenantQuota
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.procs import Proc
from tests.support.worker_support import (
    run_to_end,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
INBOX = "outsider.inbox"
PLATFORM_QUEUE = "low.long"  # a platform queue no worker of this test consumes


@pytest.fixture(scope="module")
def worker_settings() -> dict[str, Any]:
    return {"SECRETS_BACKEND": "env"}


@pytest.fixture
def broker() -> Iterator[Connection]:
    """The outsider tenant's exchange, bound to its inbox queue, both empty."""
    with Connection(settings.CELERY_BROKER_URL) as conn:
        channel = conn.default_channel
        exchange = Exchange("outsider.x", type="direct", durable=True)
        for name, key in ((INBOX, "jobs"), (PLATFORM_QUEUE, PLATFORM_QUEUE)):
            Queue(name, exchange if name == INBOX else None, routing_key=key, durable=True)(
                channel
            ).declare()
            channel.queue_purge(name)
        yield conn
        channel.queue_purge(INBOX)
        channel.queue_purge(PLATFORM_QUEUE)


def waiting(conn: Connection, name: str) -> int:
    # Not passive: Redis has no key for an empty queue, which a passive declare calls missing.
    declared = Queue(name, durable=True)(conn.default_channel).queue_declare()
    return int(declared.message_count)


def queue_target(exchange: str, routing_key: str) -> dict[str, Any]:
    return {
        "type": "queue",
        "broker": "default",
        "exchange": exchange,
        "routing_key": routing_key,
        "body": {"n": 1},
    }


def test_the_owner_can_publish_to_its_exchange(
    worker: Proc, broker: Connection, other_tenant: Tenant
) -> None:
    # The control: the binding works, so the refusals below are not vacuous.
    execution = run_to_end(make_principal(other_tenant), queue_target("outsider.x", "jobs"))
    assert execution.state == "succeeded", execution.error
    assert waiting(broker, INBOX) == 1


def test_an_edited_row_cannot_publish_to_another_tenants_exchange(
    worker: Proc, broker: Connection, admin_principal: Principal, other_tenant: Tenant
) -> None:
    execution = run_to_end(admin_principal, queue_target("outsider.x", "jobs"))
    assert execution.state == "dead" and execution.reason_code == "namespace", execution.error
    assert "billing." in execution.error and execution.attempt == 1
    assert waiting(broker, INBOX) == 0


def test_an_edited_row_cannot_publish_to_a_platform_queue(
    worker: Proc, broker: Connection, admin_principal: Principal
) -> None:
    execution = run_to_end(admin_principal, queue_target("", PLATFORM_QUEUE))
    assert execution.state == "dead" and execution.reason_code == "namespace", execution.error
    assert waiting(broker, PLATFORM_QUEUE) == 0


def test_a_tenant_named_after_a_platform_queue_publishes_nothing(
    worker: Proc, broker: Connection
) -> None:
    # Created before "low" was reserved: straight into the table.
    legacy = Tenant.objects.create(slug="low", name="Low")
    TenantQuota.objects.create(tenant=legacy)
    execution = run_to_end(make_principal(legacy), queue_target("", PLATFORM_QUEUE))
    assert execution.state == "dead" and execution.reason_code == "namespace", execution.error
    assert "reserved" in execution.error
    assert waiting(broker, PLATFORM_QUEUE) == 0
