"""The same worker over RabbitMQ: success, a duplicate delivered while running,
and RabbitMQ's own redelivery of a killed worker's unacknowledged message."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dispatch.models import ExecutionEvent
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    QUICK_RETRY,
    Pump,
    final,
    hold_first_call,
    kinds,
    make_execution,
    make_schedule,
    publish,
    purge,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "")


@pytest.fixture
def broker() -> Iterator[str]:
    if not RABBITMQ_URL:
        pytest.skip("RABBITMQ_URL not set")
    purge(RABBITMQ_URL)
    yield RABBITMQ_URL
    purge(RABBITMQ_URL)


@pytest.fixture
def start_on_rabbitmq(
    start_worker: Callable[..., Proc], broker: str, ledger: Ledger
) -> Callable[..., Proc]:
    """Workers on RabbitMQ, allowed to call the test's ledger."""

    def start(name: str, **env: str) -> Proc:
        return start_worker(
            name,
            CELERY_BROKER_URL=broker,
            WORKER_ID=name,
            TARGET_TEST_ALLOW=ledger.allow_entry,
            **env,
        )

    return start


def test_success_and_duplicate_while_running_over_rabbitmq(
    start_on_rabbitmq: Callable[..., Proc], broker: str, ledger: Ledger, admin_principal: Principal
) -> None:
    def slow(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.0)
        return 200, {}, b"ok"

    ledger.respond = slow
    start_on_rabbitmq("w1")
    execution = make_execution(
        make_schedule(admin_principal, {"type": "http", "url": f"{ledger.url}/h"})
    )
    publish(execution.id, 1, broker=broker)
    wait_for(lambda: ledger.requests, timeout=20, what="the call")
    publish(execution.id, 1, broker=broker)
    wait_for(final(execution), timeout=20)
    wait_for(lambda: "delivery_ignored" in kinds(execution), timeout=10)

    execution.refresh_from_db()
    assert execution.state == "succeeded" and execution.attempt == 1
    assert len(ledger.requests) == 1
    assert kinds(execution).count("claimed") == 1


def test_killed_worker_message_redelivered_by_rabbitmq_claims_nothing(
    start_on_rabbitmq: Callable[..., Proc], broker: str, ledger: Ledger, admin_principal: Principal
) -> None:
    called = hold_first_call(ledger, 6)
    w1 = start_on_rabbitmq("w1")
    execution = make_execution(
        make_schedule(
            admin_principal, {"type": "http", "url": f"{ledger.url}/h"}, retry=QUICK_RETRY
        )
    )
    publish(execution.id, 1, broker=broker)
    assert called.wait(20)
    start_on_rabbitmq("w2")
    w1.kill()  # its unacked message goes back to the queue, and to w2, at once

    wait_for(lambda: "delivery_ignored" in kinds(execution), timeout=15, what="the redelivery")
    ignored = ExecutionEvent.objects.get(execution=execution, kind="delivery_ignored")
    assert ignored.data["delivery"] == "duplicate" and ignored.data["message_attempt"] == 1
    assert state_of(execution) == "running"  # the redelivered message did not run it again

    Pump(broker=broker).until(final(execution), timeout=30, what="attempt 2 after the lease lapsed")
    execution.refresh_from_db()
    assert execution.state == "succeeded" and execution.attempt == 2
    assert execution.lease_owner.startswith("w2:")
    assert ledger.effects == {str(execution.id): 1} and len(ledger.requests) == 2
