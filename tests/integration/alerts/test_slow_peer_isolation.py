"""A tenant's slow alert peer holds only its own alerts: with the real control pump
(its steps' threads), while tenant A's alert is being dribbled to by A's webhook,
tenant B's failure alert reaches B's receiver and B's 120-item bulk operation is
worked through; A's send ends at its deadline, and no claimer takes it up a second
time while it is still going."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.alerting import decision, outbox
from dispatch.models import Alert, AlertChannel, Operation
from dispatch.scheduler.control import ControlPump
from dispatch.states import ControlState
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.console_support import bulk_schedules
from tests.support.dribbler import Dribbler
from tests.support.ledger import Ledger
from tests.support.procs import wait_for
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEADLINE_S = 15


def failure_alert(principal: Principal) -> Alert:
    """A failure alert owed for a dead execution of a new schedule of `principal`'s tenant."""
    schedule = make_schedule(principal, {"type": "http", "url": "http://127.0.0.1:9/"})
    execution = execution_row(schedule, db_now() - timedelta(minutes=1), state="dead")
    assert decision.decide(execution_ids=[str(execution.id)]) == 1
    return Alert.objects.get(execution_id=execution.id)


@pytest.fixture
def peer(settings: Any, ledger: Ledger) -> Iterator[Dribbler]:
    # Its answer would take 100 s, each byte well inside any per-read timeout.
    with Dribbler(gap_s=0.5, count=200) as peer:
        settings.TARGET_TEST_ALLOW = [peer.allow_entry, ledger.allow_entry]
        settings.ALERT_WEBHOOK_TIMEOUT_S = DEADLINE_S
        # Far shorter than a send may take: the claim's lease must count the sends.
        settings.ALERT_SEND_LEASE_S = 1
        settings.ALERT_RETRY_INITIAL_S = 300  # A's failed try is not retried within the test
        yield peer


def test_a_dribbling_webhook_holds_neither_another_tenants_alert_nor_its_bulk_work(
    peer: Dribbler,
    ledger: Ledger,
    tenant: Tenant,
    other_tenant: Tenant,
    admin_principal: Principal,
    api: APIClient,
) -> None:
    # Tenant A ("outsider") alerts to the dribbling peer, tenant B ("billing") to a
    # prompt receiver.
    AlertChannel.objects.create(
        tenant=other_tenant,
        name="slow",
        kind="webhook",
        config={"url": f"http://{peer.allow_entry}/"},
    )
    AlertChannel.objects.create(
        tenant=tenant, name="hook", kind="webhook", config={"url": ledger.url}
    )
    slow = failure_alert(make_principal(other_tenant))
    bulk_schedules(tenant, 120, prefix="freeze")

    pump = ControlPump(name="isolation", interval_s=0.1)
    pump.start()
    try:
        wait_for(lambda: peer.serving == 1, timeout=30, what="A's alert being sent")
        # While A's peer dribbles: B's dead execution owes an alert, and B starts a bulk
        # pause too large to run inside the request (an operation the pump carries).
        prompt = failure_alert(admin_principal)
        res = api.post(
            "/v1/schedules:bulk",
            {"action": "pause", "filter": {"search": "freeze"}, "reason": "freeze"},
            format="json",
        )
        assert res.status_code == 202, res.content
        operation_id = res.json()["id"]

        def b_done() -> bool:
            return (
                Alert.objects.get(pk=prompt.pk).state == "sent"
                and Operation.objects.get(pk=operation_id).state != ControlState.RUNNING
            )

        def a_recorded() -> bool:
            return Alert.objects.get(pk=slow.pk).last_error != ""

        wait_for(lambda: b_done() or a_recorded(), timeout=4 * DEADLINE_S, what="B's work or A's")
        # B's work all done while A's send was still going: A's alert not yet recorded,
        # its peer still dribbling to the one connection it was given.
        slow.refresh_from_db()
        assert (slow.state, slow.attempts, slow.last_error) == ("pending", 1, "")
        assert (peer.serving, peer.connections) == (1, 1)
        operation = Operation.objects.get(pk=operation_id)
        assert (operation.state, operation.processed, operation.succeeded) == (
            ControlState.DONE,
            120,
            120,
        )
        [request] = ledger.requests
        assert request["headers"]["X-Alert-Id"] == str(prompt.pk)

        # A's claim outlasts its send (one deadline per channel), so another beat's
        # sender leaves it alone although ALERT_SEND_LEASE_S alone has long run out.
        assert slow.next_attempt_at is not None
        assert slow.next_attempt_at - slow.created_at >= timedelta(seconds=DEADLINE_S)
        other_beat = outbox.Sender()
        assert other_beat.start() == (0, [])

        wait_for(a_recorded, timeout=4 * DEADLINE_S, what="A's send to end at its deadline")
        slow.refresh_from_db()
        assert (slow.state, slow.attempts) == ("pending", 1)
        assert (
            slow.last_error
            == f"webhook slow (TimeoutError: no complete answer within {DEADLINE_S} s)"
        )
        assert peer.connections == 1  # never taken up a second time
    finally:
        pump.stop(timeout=DEADLINE_S + 10)


def test_a_round_takes_a_few_alerts_of_each_tenant_not_the_oldest_of_one(
    ledger: Ledger, tenant: Tenant, other_tenant: Tenant, admin_principal: Principal, settings: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    for owner in (other_tenant, tenant):
        AlertChannel.objects.create(
            tenant=owner, name="hook", kind="webhook", config={"url": ledger.url}
        )
    # Tenant A owes 30 alerts, all older than tenant B's one.
    backlog = [failure_alert(make_principal(other_tenant)) for _ in range(30)]
    Alert.objects.filter(pk__in=[a.pk for a in backlog]).update(
        next_attempt_at=db_now() - timedelta(minutes=5)
    )
    newer = failure_alert(admin_principal)

    claimed = outbox.pump_once()
    sent = {req["headers"]["X-Alert-Id"] for req in ledger.requests}
    assert str(newer.pk) in sent  # B's alert went out in the first round
    assert claimed == outbox.PER_TENANT + 1
    assert len(sent & {str(a.pk) for a in backlog}) == outbox.PER_TENANT
