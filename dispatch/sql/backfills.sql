-- Backfills: the control pump's statements (dispatch/scheduler/backfills.py). A backfill
-- row is carried forward in chunks, each one transaction holding the row (SKIP LOCKED:
-- a busy row is another beat's, never waited for).

-- name: backfill_candidates
-- The running backfills a chunk could carry on now, fairly across tenants: each tenant's
-- oldest first, and the tenants in turn, starting after the one served last (`after`,
-- wrapping round), so a tenant's many backfills take no more turns than another's one.
-- Left out, so they take none of the `limit` slots: those a chunk would leave as they are
-- (scheduler/backfills.py `_step` and `_room`, the same tests in the same order) — the
-- backfill's cap of active runs reached, the schedule paused or (overlap forbid / replace)
-- running something, the plan walked with its last runs still active. They stay running
-- with their progress as it is; the chunk decides again under the row's lock (this read is
-- a filter, not the decision). The CASE reads the plan's length (the whole stored plan)
-- only where the answer depends on it.
WITH workable AS (
    SELECT b.id, b.tenant_id, b.created_at
    FROM dispatch_backfill b
    JOIN dispatch_schedule s ON s.id = b.schedule_id
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM dispatch_execution e
        WHERE e.backfill_id = b.id AND e.state = ANY(%(active)s::text[])
    ) a
    WHERE b.state = %(running)s
      AND CASE
          WHEN s.deleted_at IS NOT NULL THEN true  -- to end it cancelled
          WHEN a.n >= b.max_concurrent THEN false  -- waits for its runs
          WHEN s.paused THEN a.n = 0 AND b.position >= jsonb_array_length(b.plan)  -- to end done
          WHEN s.overlap <> %(allow)s AND EXISTS (
              SELECT 1 FROM dispatch_execution e
              WHERE e.schedule_id = b.schedule_id AND e.state = ANY(%(active)s::text[])
                AND NOT (e.state = %(scheduled)s AND e.due_at > statement_timestamp())
          ) THEN a.n = 0 AND b.position >= jsonb_array_length(b.plan)  -- to end done
          WHEN a.n = 0 THEN true  -- room to release, or done
          ELSE b.position < jsonb_array_length(b.plan)  -- room left, unless only ending waits
      END
)
SELECT w.id, w.tenant_id
FROM (
    SELECT w.*, row_number() OVER (PARTITION BY w.tenant_id ORDER BY w.created_at, w.id) AS turn
    FROM workable w
) w
ORDER BY w.turn, w.tenant_id <= %(after)s, w.tenant_id
LIMIT %(limit)s

-- name: backfill_tenant_lock
-- Creates of one tenant's backfills take turns while they count its running ones (two
-- requests must not both take the last place under its bound). An advisory lock of its own
-- key space, not the tenant's row.
SELECT pg_advisory_xact_lock(4244, hashtext(%(tenant_id)s::text))

-- name: backfill_tenant_running
-- The tenant's running backfills (the bound counts these).
SELECT count(*) FROM dispatch_backfill b
WHERE b.tenant_id = %(tenant_id)s AND b.state = %(running)s

-- name: backfill_lock
-- One running backfill, locked for this chunk, with its schedule's policy and how many of its
-- executions are still active (the per-backfill concurrency cap counts these).
SELECT b.id, b.tenant_id, b.schedule_id, b.position, jsonb_array_length(b.plan) AS total,
       b.max_concurrent, b.created_by, s.overlap, s.partition, s.paused,
       s.deleted_at IS NOT NULL AS deleted,
       (SELECT count(*) FROM dispatch_execution e
         WHERE e.backfill_id = b.id AND e.state = ANY(%(active)s::text[])) AS active
FROM dispatch_backfill b
JOIN dispatch_schedule s ON s.id = b.schedule_id
WHERE b.id = %(id)s AND b.state = %(running)s
FOR UPDATE OF b SKIP LOCKED

-- name: backfill_schedule_lock
-- Under overlap forbid / replace, the pumps deciding releases for one schedule take turns
-- (two beats carrying two backfills of it must not both see it idle). An advisory lock of
-- its own key space (two int4 keys), not the schedule row: the beat's claim never waits on it.
SELECT pg_advisory_xact_lock(4243, hashtext(%(schedule_id)s::text))

-- name: backfill_schedule_active
-- Active runs of the schedule, whatever made them (overlap forbid / replace: one at a time),
-- except an occurrence the beat planned ahead that is not due yet (not a run in progress).
SELECT count(*) FROM dispatch_execution e
WHERE e.schedule_id = %(schedule_id)s AND e.state = ANY(%(active)s::text[])
  AND NOT (e.state = %(scheduled)s AND e.due_at > statement_timestamp())

-- name: backfill_items
-- The plan's entries after `position` (numbered from 1), at most `limit` of them: a JSON path
-- slice, so a chunk near the end of a 10,000-entry plan does not expand the entries before it.
SELECT %(position)s + p.n::int AS n, (p.item->>0)::timestamptz AS scheduled_for,
       p.item->>1 AS action
FROM dispatch_backfill b,
     jsonb_array_elements(jsonb_path_query_array(
         b.plan, '$[$lo to $hi]',
         jsonb_build_object('lo', %(position)s::int, 'hi', %(position)s::int + %(limit)s::int - 1)
     )) WITH ORDINALITY AS p(item, n)
WHERE b.id = %(id)s
ORDER BY p.n

-- name: backfill_insert_executions
-- The occurrences to create, due now (database clock), each with a `backfilled` event naming
-- the backfill (its timeline says where it came from); one that appeared meanwhile (the beat,
-- another backfill) keeps its row: the unique key drops ours and it is counted as skipped.
WITH inserted AS (
    INSERT INTO dispatch_execution
        (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt, state,
         fencing_token, reason_code, reason, created_at, backfill_id)
    SELECT dispatch_execution_id(v.scheduled_for), %(schedule_id)s, %(tenant_id)s, %(partition)s, v.scheduled_for,
           statement_timestamp(), %(trigger)s, 1, %(state)s, 0, '', '', clock_timestamp(),
           %(backfill_id)s
    FROM unnest(%(scheduled_fors)s::timestamptz[]) AS v(scheduled_for)
    ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
    RETURNING id
), noted AS (
    -- (A data-modifying WITH runs whether or not the outer query reads it.)
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT %(tenant_id)s, %(schedule_id)s, i.id, %(kind)s, %(message)s, %(data)s::jsonb, %(actor)s
    FROM inserted i
    RETURNING 1
)
SELECT i.id FROM inserted i

-- name: backfill_existing
-- The executions of re-run entries, by occurrence.
SELECT e.scheduled_for, e.id FROM dispatch_execution e
WHERE e.schedule_id = %(schedule_id)s AND e.scheduled_for = ANY(%(scheduled_fors)s::timestamptz[])

-- name: backfill_advance
-- The chunk's progress, committed with what it released.
UPDATE dispatch_backfill
SET position = %(position)s, created = created + %(created)s, rerun = rerun + %(rerun)s,
    skipped = skipped + %(skipped)s
WHERE id = %(id)s

-- name: backfill_finish
-- The end of a backfill: done (every entry released and none of its runs active), or
-- cancelled by the platform (its schedule was deleted).
UPDATE dispatch_backfill
SET state = %(state)s, finished_at = statement_timestamp(), cancelled_by = %(cancelled_by)s
WHERE id = %(id)s AND state = %(running)s
