-- Statements of the lease sweeper (dispatch/scheduler/sweeper.py), run by every beat for
-- its partitions. Both are token-conditional: a row is moved only at the fencing token
-- it was read with, so a sweep racing a worker's completion (or another sweep) changes nothing.

-- name: sweep_lock_expired
-- Running executions whose lease lapsed or which ran past timeout + grace (backstop); locked, skipping rows another sweeper holds.
-- A re-run's edited target brings its own timeout; its chain counts attempts from attempt_base.
SELECT e.id, e.tenant_id, e.schedule_id, e.attempt, e.fencing_token, e.lease_owner,
       e.lease_expires_at, e.started_at, s.retry,
       COALESCE((e.target_override->>'timeout_s')::int, s.timeout_s) AS timeout_s,
       e.lease_expires_at < now() AS lease_expired, e.attempt_base
  FROM dispatch_execution e
  JOIN dispatch_schedule s ON s.id = e.schedule_id
 WHERE e.state = 'running'
   AND (e.lease_expires_at < now()
        OR e.started_at + make_interval(
               secs => COALESCE((e.target_override->>'timeout_s')::int, s.timeout_s) + %(grace_s)s
           ) < now())
   -- A hashed set, not = ANY: see the note on `numbers` in beat.sql.
   AND (%(all_partitions)s OR e.partition IN (SELECT unnest(%(partitions)s::int[])))
 ORDER BY e.lease_expires_at
 LIMIT %(limit)s
   FOR UPDATE OF e SKIP LOCKED

-- name: sweep_apply
-- Move swept rows to retry_scheduled (attempt + 1) or dead, bumping the token so the lost worker's late writes are rejected.
WITH decided AS (
    SELECT *
      FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[], %(states)s::text[],
                  %(delays)s::float8[], %(codes)s::text[], %(reasons)s::text[])
           AS d(id, token, state, delay_s, code, reason)
)
UPDATE dispatch_execution e
   SET state = d.state,
       attempt = e.attempt + CASE WHEN d.state = 'retry_scheduled' THEN 1 ELSE 0 END,
       fencing_token = e.fencing_token + 1,
       next_attempt_at = CASE WHEN d.state = 'retry_scheduled'
                              THEN now() + make_interval(secs => d.delay_s) END,
       finished_at = CASE WHEN d.state = 'dead' THEN now() END,
       lease_expires_at = NULL,
       error = d.reason,
       reason_code = d.code,
       reason = left(d.reason, 500)
  FROM decided d
 WHERE e.id = d.id
   AND e.fencing_token = d.token
   AND e.state = 'running'
RETURNING e.id, e.attempt, e.fencing_token
