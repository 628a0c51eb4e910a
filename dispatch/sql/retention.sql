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

-- name: retention_expire_jobs
-- One batch of one-off jobs past their delete_after: fired (no next run), nothing of theirs
-- still active, and their latest execution final for at least delete_after (DB clock). Soft
-- deleted as DELETE /v1/jobs/{id} does (deleted_at, a version bump, an audit row and a
-- timeline event); their executions stay, for retention's own period. Only live one-offs
-- with a delete_after are read (the partial index schedule_delete_after): keeping jobs
-- costs this pass nothing.
WITH due AS (
    SELECT s.id, s.tenant_id, s.delete_after, last.ended
    FROM dispatch_schedule s
    CROSS JOIN LATERAL (
        SELECT max(COALESCE(e.finished_at, e.created_at)) AS ended,
               bool_or(e.state <> ALL(%(final)s::text[])) AS active
        FROM dispatch_execution e WHERE e.schedule_id = s.id
    ) last
    WHERE s.delete_after IS NOT NULL AND s.deleted_at IS NULL
      AND s.kind = 'once' AND s.next_run_at IS NULL
      AND last.ended IS NOT NULL AND NOT last.active
      AND last.ended + s.delete_after <= now()
    LIMIT %(batch)s
    FOR UPDATE OF s SKIP LOCKED
), gone AS (
    UPDATE dispatch_schedule s
    SET deleted_at = now(), version = s.version + 1, updated_at = now()
    FROM due d WHERE s.id = d.id
    RETURNING s.id, s.tenant_id, s.name, d.delete_after, d.ended
), audits AS (
    INSERT INTO tenants_auditevent (tenant_id, at, actor_kind, actor_id, actor_label, action,
                                    object_type, object_id, after, request_id, outcome)
    SELECT g.tenant_id, now(), 'system', '', 'retention', %(action)s, 'schedule', g.id::text,
           jsonb_build_object('deleted_by', 'delete_after', 'delete_after', g.delete_after::text),
           '', 'ok'
    FROM gone g
    RETURNING id, object_id
), events AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, at, kind, message, data, actor)
    SELECT g.tenant_id, g.id, now(), %(kind)s,
           'removed by retention: delete_after ' || g.delete_after::text
               || ' passed since its run ended at '
               || to_char(g.ended AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
           jsonb_build_object('delete_after_s', EXTRACT(EPOCH FROM g.delete_after), 'audit_id', a.id),
           'retention'
    FROM gone g JOIN audits a ON a.object_id = g.id::text
)
SELECT count(*) AS expired FROM gone
