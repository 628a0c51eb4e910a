"""Two connections racing to create the same occurrence: exactly one row.

This is the guarantee beats rely on (failure contract C1:
docs/explanation/failure-contract.md): firing is idempotent
because of UNIQUE(schedule_id, scheduled_for), not because of luck.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from dispatch import services
from dispatch.models import Execution
from tenants.roles import Principal
from tests.support.procs import db_conninfo

INSERT = """
INSERT INTO dispatch_execution
    (id, schedule_id, tenant_id, scheduled_for, due_at, trigger, attempt, state, queue, lease_owner,
     fencing_token, error, log_excerpt, reason_code, reason, created_at)
VALUES (%s, %s, %s, %s, %s, 'cron', 1, 'scheduled', '', '', 0, '', '', '', '', now())
ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
RETURNING id
"""


@pytest.mark.django_db(transaction=True)
def test_two_connections_racing_one_occurrence_create_one_row(
    admin_principal: Principal, seed_example: dict
) -> None:
    schedule = services.schedule_create(
        actor=admin_principal, data={k: v for k, v in seed_example.items() if k != "tenant"}
    )
    occurrence = datetime(2030, 1, 1, 23, 0, tzinfo=UTC)
    rounds = 25
    won: list[int] = []
    for _ in range(rounds):
        occ = occurrence.replace(minute=len(won) % 60, second=len(won) // 60)
        barrier = threading.Barrier(2)
        results: list[bool] = []

        def fire(
            occ: datetime = occ, barrier: threading.Barrier = barrier, results: list[bool] = results
        ) -> None:
            with psycopg.connect(db_conninfo(), autocommit=False) as conn:
                barrier.wait()
                # The loser's INSERT waits on the winner's uncommitted index entry,
                # then does nothing once the winner commits: no error, no second row.
                row = conn.execute(
                    INSERT, (uuid.uuid4(), schedule.id, schedule.tenant_id, occ, occ)
                ).fetchone()
                conn.commit()
                results.append(row is not None)

        threads = [threading.Thread(target=fire) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, True]
        won.append(1)
    assert Execution.objects.filter(schedule=schedule).count() == rounds
