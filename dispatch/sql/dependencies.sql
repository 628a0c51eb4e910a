-- Dependencies: when an upstream execution becomes final, its dependents' occurrences
-- (same scheduled_for) are fired or recorded skipped, in the transaction that made it
-- final. One occurrence per dependent: the unique key drops what already exists.

-- name: propagate_dependents
-- Fire (every upstream succeeded for the occurrence) or skip (an upstream ended otherwise,
-- named in the reason) the live, unpaused dependents of the given final executions, in one
-- statement; wakes the beats of the partitions that got a scheduled occurrence.
WITH finished AS (
    SELECT e.id, e.state, e.scheduled_for, e.reason_code, up.name AS upstream_name,
           d.id AS dependent_id, d.tenant_id, d.partition
    FROM dispatch_execution e
    JOIN dispatch_schedule up ON up.id = e.schedule_id
    JOIN dispatch_schedule_depends_on link ON link.to_schedule_id = e.schedule_id
    JOIN dispatch_schedule d ON d.id = link.from_schedule_id
    WHERE e.id = ANY(%(ids)s::uuid[]) AND e.state = ANY(%(final)s::text[])
      AND d.deleted_at IS NULL AND NOT d.paused
), decided AS (
    -- One row per dependent occurrence: a failed upstream decides it (skipped, naming
    -- the first such upstream by name), else it fires once every upstream succeeded.
    SELECT DISTINCT ON (f.dependent_id, f.scheduled_for)
           f.dependent_id, f.tenant_id, f.partition, f.scheduled_for,
           CASE WHEN f.state = 'succeeded' THEN 'scheduled' ELSE 'skipped' END AS state,
           CASE WHEN f.state = 'succeeded' THEN '' ELSE 'upstream' END AS reason_code,
           CASE WHEN f.state = 'succeeded' THEN ''
                ELSE 'skipped: upstream ' || f.upstream_name || ' '
                     || CASE WHEN f.reason_code = 'paused' THEN f.state || ' while paused' ELSE f.state END
                     || ' (execution ' || f.id || ')'
           END AS reason
    FROM finished f
    WHERE f.state <> 'succeeded'
       OR (SELECT bool_and(EXISTS (
               SELECT 1 FROM dispatch_execution x
               WHERE x.schedule_id = link.to_schedule_id AND x.scheduled_for = f.scheduled_for
                 AND x.state = 'succeeded'))
           FROM dispatch_schedule_depends_on link WHERE link.from_schedule_id = f.dependent_id)
    ORDER BY f.dependent_id, f.scheduled_for, f.state = 'succeeded', f.upstream_name, f.id
), inserted AS (
    INSERT INTO dispatch_execution
        (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt, state,
         fencing_token, reason_code, reason, created_at, fired_by)
    SELECT dispatch_execution_id(v.scheduled_for), v.dependent_id, v.tenant_id, v.partition, v.scheduled_for,
           GREATEST(v.scheduled_for, clock_timestamp()), 'dependency', 1, v.state,
           0, v.reason_code, v.reason, clock_timestamp(), 'dependency'
    FROM decided v
    ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
    RETURNING state, partition
), woken AS (
    -- Delivered at commit, once per partition and transaction (PostgreSQL folds duplicates).
    SELECT pg_notify(%(channel)s, partition::text) FROM inserted WHERE state = 'scheduled'
)
SELECT (SELECT count(*) FROM inserted) AS written, (SELECT count(*) FROM woken) AS woken
