"""Simple dependencies: B runs after A succeeds, for the same occurrence.

A schedule that names upstream schedules is fired by them, not by its own
timing: when every upstream has succeeded for an occurrence `scheduled_for`,
the dependent gets an execution for that same `scheduled_for`; when any
upstream ends otherwise (dead, skipped, cancelled), the dependent's occurrence
is recorded as skipped, naming the upstream. A paused upstream's occurrences
are recorded skipped (reason `paused`) by the beat as they fall due
(Beat.record_paused), so its dependents are skipped too instead of waiting
forever. Call `propagate` inside the transaction that made the upstream
execution final.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection

from core.db import notify
from dispatch.services import WAKE_CHANNEL

_DEPENDENTS = """
SELECT e.id, e.state, e.scheduled_for, up.name, d.id, d.tenant_id, d.partition, e.reason_code
FROM dispatch_execution e
JOIN dispatch_schedule up ON up.id = e.schedule_id
JOIN dispatch_schedule_depends_on link ON link.to_schedule_id = e.schedule_id
JOIN dispatch_schedule d ON d.id = link.from_schedule_id
WHERE e.id = ANY(%(ids)s::uuid[]) AND e.state IN ('succeeded', 'dead', 'skipped', 'cancelled')
  AND d.deleted_at IS NULL AND NOT d.paused
"""

_ALL_UPSTREAMS_SUCCEEDED = """
SELECT bool_and(EXISTS (
    SELECT 1 FROM dispatch_execution x
    WHERE x.schedule_id = link.to_schedule_id AND x.scheduled_for = %(at)s AND x.state = 'succeeded'))
FROM dispatch_schedule_depends_on link WHERE link.from_schedule_id = %(dependent)s
"""

_INSERT = """
INSERT INTO dispatch_execution
    (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt, state, queue, lease_owner,
     fencing_token, error, log_excerpt, reason_code, reason, created_at, fired_by)
VALUES (%(id)s, %(schedule)s, %(tenant)s, %(partition)s, %(at)s, GREATEST(%(at)s, clock_timestamp()),
        'dependency', 1, %(state)s, '', '', 0, '', '', %(code)s, %(reason)s, clock_timestamp(), 'dependency')
ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
RETURNING id
"""


def propagate(*, execution_ids: list[Any]) -> int:
    """Fire or skip the dependents of executions that just became final; returns rows written."""
    if not execution_ids:
        return 0
    written = 0
    with connection.cursor() as cur:
        cur.execute(_DEPENDENTS, {"ids": [str(i) for i in execution_ids]})
        rows = cur.fetchall()
        for upstream_eid, state, at, upstream_name, dependent, tenant_id, partition, code in rows:
            if state == "succeeded":
                cur.execute(_ALL_UPSTREAMS_SUCCEEDED, {"at": at, "dependent": dependent})
                if not cur.fetchone()[0]:
                    continue  # another upstream has not succeeded (yet) for this occurrence
                params = {"state": "scheduled", "code": "", "reason": ""}
            else:
                how = f"{state} while paused" if code == "paused" else state
                params = {
                    "state": "skipped",
                    "code": "upstream",
                    "reason": f"skipped: upstream {upstream_name} {how} (execution {upstream_eid})",
                }
            cur.execute(
                _INSERT,
                {
                    "id": uuid.uuid4(),
                    "schedule": dependent,
                    "tenant": tenant_id,
                    "partition": partition,
                    "at": at,
                    **params,
                },
            )
            if cur.fetchone() is not None:
                written += 1
                if params["state"] == "scheduled":
                    notify(WAKE_CHANNEL, str(partition))
    return written
