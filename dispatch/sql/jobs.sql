-- One-off jobs in bulk: POST /v1/jobs:batch (dispatch/services/jobs.py).

-- name: jobs_insert
-- A batch's jobs, their audit rows and their `created` events in one statement, one
-- row per array element. ON CONFLICT DO NOTHING: a job whose idempotency key or name
-- a concurrent request took first is not inserted (and gets neither row); the caller
-- answers it from the winner. Returns the inserted jobs with their database defaults.
-- A job due within the wake horizon wakes the beats once (any wake-up makes a beat look).
WITH v AS (
    SELECT *
    FROM unnest(%(ids)b::uuid[], %(names)b::text[], %(kinds)b::text[], %(crons)b::text[],
                %(timezones)b::text[], %(run_ats)b::timestamptz[], %(targets)b::jsonb[],
                %(retries)b::jsonb[], %(timeouts)b::int[], %(priorities)b::text[],
                %(durations)b::text[], %(overlaps)b::text[], %(misfires)b::text[],
                %(graces)b::int[], %(catch_ups)b::int[], %(jitters)b::int[],
                %(keys)b::text[], %(digests)b::text[], %(next_runs)b::timestamptz[],
                %(partitions)b::int[], %(snapshots)b::jsonb[], %(delete_afters)b::interval[],
                %(ckeys)b::jsonb[])
         AS v(id, name, kind, cron, timezone, run_at, target, retry, timeout_s, priority,
              duration_class, overlap, misfire, misfire_grace_s, catch_up_limit, jitter_s,
              idempotency_key, request_digest, next_run_at, partition, snapshot, delete_after,
              concurrency_key)
), jobs AS (
    INSERT INTO dispatch_schedule (
        id, tenant_id, name, kind, cron, timezone, run_at, target, retry, timeout_s, priority,
        duration_class, overlap, misfire, misfire_grace_s, catch_up_limit, jitter_s, paused,
        paused_reason, paused_by, version, idempotency_key, request_digest, next_run_at,
        partition, created_by, delete_after, concurrency_key)
    SELECT id, %(tenant_id)s, name, kind, cron, timezone, run_at, target, retry,
           timeout_s, priority, duration_class, overlap, misfire, misfire_grace_s,
           catch_up_limit, jitter_s, false, '', '', 1, idempotency_key, request_digest,
           next_run_at, partition, %(actor_label)s, delete_after, concurrency_key
    FROM v
    ON CONFLICT DO NOTHING
    RETURNING id, created_at, updated_at, partition, next_run_at
), audits AS (
    INSERT INTO tenants_auditevent (
        tenant_id, at, actor_kind, actor_id, actor_label, action, object_type, object_id,
        after, request_id, outcome)
    SELECT %(tenant_id)s, now(), %(actor_kind)s, %(actor_id)s, %(actor_label)s, %(action)s,
           'schedule', j.id::text, v.snapshot, %(request_id)s, 'ok'
    FROM jobs j JOIN v ON v.id = j.id
    RETURNING id, object_id
), events AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, at, kind, message, data, actor)
    SELECT %(tenant_id)s, a.object_id::uuid, now(), %(event_kind)s, %(message)s,
           jsonb_build_object(%(audit_key)s::text, a.id), %(actor_label)s
    FROM audits a
    RETURNING id
), woken AS (
    SELECT pg_notify(%(channel)s, min(partition)::text) AS sent
    FROM jobs
    WHERE next_run_at <= now() + make_interval(secs => %(wake_s)s)
    HAVING count(*) > 0
)
SELECT j.id, j.created_at, j.updated_at,
       (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM woken) AS woken
FROM jobs j
