-- The alert outbox (dispatch/alerting/outbox.py): the decision, written in the
-- transaction that changed the execution, and the sender's claim / result.

-- name: alert_decide
-- Decide, for executions that just ended dead / timed_out / succeeded, which alert (if any) each owes, and insert it (dedup on (schedule, occurrence, kind)).
-- Failure: the Nth consecutive failed occurrence (cancelled and skipped ones neither
-- count nor break the streak), or a later one at least realert_s after the last
-- failure alert. Recovery: the first success after a failure alert. Alerts only for
-- tenants with an enabled channel. Reads at most N earlier occurrences, through the
-- (schedule, scheduled_for) index. Keeps dispatch_schedule.alert_failing, which the
-- worker's claim reads so that an ordinary success never comes here.
WITH e AS (
    SELECT x.id, x.tenant_id, x.schedule_id, x.scheduled_for, x.state, x.reason_code, x.reason,
           x.attempt - x.attempt_base AS attempts, x.finished_at, s.name AS schedule_name,
           s.alert_failing, t.slug AS tenant_slug,
           COALESCE(p.failure_threshold, 1) AS threshold,
           COALESCE(p.recovery, true) AS recovery,
           COALESCE(p.realert_s, 0) AS realert_s,
           EXISTS (SELECT 1 FROM dispatch_alertchannel c
                    WHERE c.tenant_id = x.tenant_id AND c.enabled) AS has_channel
      FROM dispatch_execution x
      JOIN dispatch_schedule s ON s.id = x.schedule_id
      JOIN tenants_tenant t ON t.id = x.tenant_id
      LEFT JOIN LATERAL (
            SELECT failure_threshold, recovery, realert_s
              FROM dispatch_alertpolicy p
             WHERE p.tenant_id = x.tenant_id
               AND (p.schedule_id = x.schedule_id OR p.schedule_id IS NULL)
             ORDER BY p.schedule_id NULLS LAST
             LIMIT 1) p ON true
     WHERE x.id = ANY(%(ids)s::uuid[])
       AND x.state IN ('dead', 'timed_out', 'succeeded')
), owed AS (
    SELECT e.*,
           CASE
             WHEN NOT e.has_channel THEN NULL
             WHEN e.state = 'succeeded' THEN
               CASE WHEN e.alert_failing AND e.recovery THEN 'recovery' END
             WHEN f.failed_before = e.threshold - 1 THEN 'failure'
             WHEN f.failed_before >= e.threshold AND e.realert_s > 0
                  AND NOT EXISTS (
                        SELECT 1 FROM dispatch_alert a
                         WHERE a.schedule_id = e.schedule_id AND a.kind = 'failure'
                           AND a.created_at > now() - make_interval(secs => e.realert_s))
               THEN 'failure'
           END AS kind,
           f.failed_before
      FROM e
      CROSS JOIN LATERAL (
            -- Failed occurrences right before this one, counted up to the threshold.
            SELECT COALESCE(min(rn) FILTER (WHERE NOT failed) - 1, count(*)) AS failed_before
              FROM (SELECT prev.state IN ('dead', 'timed_out') AS failed,
                           row_number() OVER (ORDER BY prev.scheduled_for DESC) AS rn
                      FROM dispatch_execution prev
                     WHERE e.state <> 'succeeded'
                       AND prev.schedule_id = e.schedule_id
                       AND prev.scheduled_for < e.scheduled_for
                       AND prev.state IN ('dead', 'timed_out', 'succeeded')
                     ORDER BY prev.scheduled_for DESC
                     LIMIT e.threshold) last_n) f
), inserted AS (
    INSERT INTO dispatch_alert (id, tenant_id, schedule_id, execution_id, scheduled_for, kind,
                                payload, state, attempts, next_attempt_at, delivered, last_error,
                                created_at)
    SELECT gen_random_uuid(), o.tenant_id, o.schedule_id, o.id, o.scheduled_for, o.kind,
           jsonb_build_object(
               'tenant', o.tenant_slug,
               'schedule_id', o.schedule_id,
               'schedule_name', o.schedule_name,
               'execution_id', o.id,
               'scheduled_for', o.scheduled_for,
               'state', o.state,
               'consecutive_failures', CASE WHEN o.kind = 'failure' THEN o.failed_before + 1 END,
               'threshold', o.threshold,
               'attempts', o.attempts,
               'reason_code', o.reason_code,
               'reason', o.reason,
               'finished_at', o.finished_at),
           'pending', 0, now(), '[]'::jsonb, '', now()
      FROM owed o
     WHERE o.kind IS NOT NULL
    ON CONFLICT (schedule_id, scheduled_for, kind) DO NOTHING
    RETURNING id, schedule_id, kind
), flagged AS (
    -- Failing from a failure alert on; no longer after the first success.
    UPDATE dispatch_schedule s
       SET alert_failing = flag.failing
      FROM (SELECT schedule_id, bool_or(kind = 'failure') AS failing FROM inserted
             GROUP BY schedule_id
            UNION ALL
            SELECT schedule_id, false FROM e
             WHERE state = 'succeeded' AND alert_failing
               AND schedule_id NOT IN (SELECT schedule_id FROM inserted)
             GROUP BY schedule_id) flag
     WHERE s.id = flag.schedule_id AND s.alert_failing IS DISTINCT FROM flag.failing
)
SELECT id FROM inserted

-- name: alert_claim
-- Take up to `batch` due pending alerts for one delivery attempt; the claim pushes next_attempt_at out by `lease_s`, so an alert whose sender died mid-send is taken up again then (at most one duplicate).
UPDATE dispatch_alert a
   SET attempts = a.attempts + 1,
       next_attempt_at = now() + make_interval(secs => %(lease_s)s)
  FROM (SELECT id FROM dispatch_alert
         WHERE state = 'pending' AND next_attempt_at <= now()
         ORDER BY next_attempt_at
         LIMIT %(batch)s
           FOR UPDATE SKIP LOCKED) due
 WHERE a.id = due.id
RETURNING a.id, a.tenant_id, a.schedule_id, a.execution_id, a.kind, a.payload, a.attempts,
          a.delivered

-- name: alert_result
-- Record one delivery attempt: `state` sent / failed, or pending again at now() + retry_s; `delivered` lists the channels that took it.
UPDATE dispatch_alert
   SET state = %(state)s::text,
       next_attempt_at = CASE WHEN %(state)s::text = 'pending'
                              THEN now() + make_interval(secs => %(retry_s)s) END,
       delivered = %(delivered)s::jsonb,
       last_error = left(%(error)s::text, 500),
       sent_at = CASE WHEN %(state)s::text = 'sent' THEN now() END
 WHERE id = %(id)s::uuid
