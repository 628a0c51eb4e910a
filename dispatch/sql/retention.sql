-- History retention (dispatch/scheduler/retention.py): expired final executions and
-- their events go in small batches, each an index range scan with a LIMIT.

-- name: retention_pick
-- One batch of a tenant's final executions scheduled before the cutoff, locked (SKIP LOCKED: a racing purge takes others).
SELECT id FROM dispatch_execution
WHERE tenant_id = %(tenant)s AND scheduled_for < %(cutoff)s
  AND state = ANY(%(final)s::text[])
ORDER BY scheduled_for
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED

-- name: retention_archive
-- The picked executions as JSON, each with its events (by id) as a JSON array, for the archive file.
SELECT row_to_json(e)::text AS execution,
       COALESCE((SELECT json_agg(ev ORDER BY ev.id)::text FROM dispatch_executionevent ev
                 WHERE ev.execution_id = e.id), '[]') AS events
FROM dispatch_execution e WHERE e.id = ANY(%(ids)s::uuid[])

-- name: retention_delete_events
-- The timeline events of the picked executions; returns how many went.
WITH gone AS (DELETE FROM dispatch_executionevent WHERE execution_id = ANY(%(ids)s::uuid[]) RETURNING 1)
SELECT count(*) AS deleted FROM gone

-- name: retention_delete_executions
-- The picked executions themselves (after their events); returns how many went.
WITH gone AS (DELETE FROM dispatch_execution WHERE id = ANY(%(ids)s::uuid[]) RETURNING 1)
SELECT count(*) AS deleted FROM gone

-- name: retention_delete_schedule_events
-- One batch of a tenant's schedule-level events (no execution) older than the cutoff; returns how many went.
WITH gone AS (
    DELETE FROM dispatch_executionevent WHERE id IN (
        SELECT id FROM dispatch_executionevent
        WHERE tenant_id = %(tenant)s AND execution_id IS NULL AND at < %(cutoff)s
        ORDER BY at LIMIT %(batch)s)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone
