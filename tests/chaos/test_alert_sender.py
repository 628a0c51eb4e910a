"""The alert sender nemesis: the beat whose control pump is delivering a batch of
alerts is killed (SIGKILL) mid-batch, another beat takes over, and every alert
arrives at the receiver — a duplicate is allowed (at most one per alert: the
killed sender's in-flight one), a loss never.

The alerts are decided as the worker decides them (dead executions through
`alert_decide`); the receiver answers slowly, so the kill lands while the batch
is being sent. Each alert's identity at the receiver is its X-Alert-Id.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dispatch.alerting import decision
from dispatch.models import Alert, AlertChannel
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import beat_cmd, processes, wait_for
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = [
    pytest.mark.system,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

ALERTS = 30
LEASE_S = "3"  # how long a killed sender's claimed alerts wait before another takes them


def slow(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    time.sleep(0.15)
    return 200, {}, b"ok"


def beat(start: Any, name: str, ledger: Ledger) -> Any:
    return start(
        name,
        beat_cmd("--name", name, "--lease-ttl", "3", "--cycle", "0.2"),
        CONTROL_INTERVAL_S="0.2",
        ALERT_SEND_LEASE_S=LEASE_S,
        TARGET_TEST_ALLOW=ledger.allow_entry,
    )


def test_killing_the_sender_mid_batch_loses_no_alert(
    tmp_path: Path, admin_principal: Principal, ledger: Ledger
) -> None:
    ledger.respond = slow
    AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="hook", kind="webhook", config={"url": ledger.url}
    )
    target = {"type": "http", "url": "http://127.0.0.1:9/"}
    for _ in range(ALERTS):
        execution = execution_row(
            make_schedule(admin_principal, target), db_now() - timedelta(minutes=1), state="dead"
        )
        assert decision.decide(execution_ids=[str(execution.id)]) == 1
    expected = {str(pk) for pk in Alert.objects.values_list("id", flat=True)}
    assert len(expected) == ALERTS

    with processes(tmp_path) as start:
        first = beat(start, "beat-a", ledger)
        wait_for(lambda: len(ledger.requests) >= 5, timeout=60, what="the first deliveries")
        first.kill()  # mid-batch: its claimed alerts are committed as attempted, not sent
        seen_at_kill = len(ledger.requests)
        assert seen_at_kill < ALERTS, "the batch finished before the kill"
        beat(start, "beat-b", ledger)
        wait_for(
            lambda: not Alert.objects.exclude(state="sent").exists(),
            timeout=120,
            what="every alert sent",
        )

    counts = Counter(req["headers"]["X-Alert-Id"] for req in ledger.requests)
    assert set(counts) == expected  # nothing lost, nothing unknown
    assert max(counts.values()) <= 2, counts.most_common(3)
    duplicates = sum(n - 1 for n in counts.values())
    # Only the alert being sent when the sender died can arrive twice.
    assert duplicates <= 1, counts.most_common(3)
