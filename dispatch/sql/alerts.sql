-- The alert outbox (dispatch/alerting/outbox.py): the decision, written in the
-- transaction that changed the execution, and the sender's claim / result.

-- name: alert_decide
-- Decide, for executions that just ended dead / timed_out / succeeded, which alerts each owes (dedup on (schedule, occurrence, kind)) and whether the circuit breaker pauses the schedule.
-- Failure: the Nth consecutive failed occurrence (cancelled and skipped ones neither
-- count nor break the streak), or a later one at least realert_s after the last
-- failure alert. Recovery: the first success after a failure alert. Auto-pause: the
-- Kth consecutive failure since the breaker last tripped pauses the schedule (until a
-- person resumes it) with a machine note, and alerts once. No alert while the
-- schedule is snoozed, nor for a tenant without an enabled channel. Reads at most
-- max(N, K) earlier occurrences through the (schedule, scheduled_for) index, and keeps
-- dispatch_schedule.alert_failing, which the worker's claim reads so that an
-- ordinary success never comes here.
WITH e AS (
    SELECT x.id, x.tenant_id, x.schedule_id, x.scheduled_for, x.state, x.reason_code, x.reason,
           x.attempt - x.attempt_base AS attempts, x.finished_at, s.name AS schedule_name,
           s.alert_failing, s.paused OR s.deleted_at IS NOT NULL AS paused,
           COALESCE(s.alert_snoozed_until > now(), false) AS snoozed,
           COALESCE(s.breaker_tripped_for, '-infinity') AS breaker_tripped_for,
           t.slug AS tenant_slug,
           COALESCE(p.failure_threshold, 1) AS threshold,
           COALESCE(p.recovery, true) AS recovery,
           COALESCE(p.realert_s, 0) AS realert_s,
           COALESCE(p.auto_pause_after, 0) AS auto_pause_after,
           EXISTS (SELECT 1 FROM dispatch_alertchannel c
                    WHERE c.tenant_id = x.tenant_id AND c.enabled) AS has_channel
      FROM dispatch_execution x
      JOIN dispatch_schedule s ON s.id = x.schedule_id
      JOIN tenants_tenant t ON t.id = x.tenant_id
      LEFT JOIN LATERAL (
            SELECT failure_threshold, recovery, realert_s, auto_pause_after
              FROM dispatch_alertpolicy p
             WHERE p.tenant_id = x.tenant_id
               AND (p.schedule_id = x.schedule_id OR p.schedule_id IS NULL)
             ORDER BY p.schedule_id NULLS LAST
             LIMIT 1) p ON true
     WHERE x.id = ANY(%(ids)s::uuid[])
       AND x.state IN ('dead', 'timed_out', 'succeeded')
), streaks AS (
    SELECT e.*,
           -- Failed occurrences right before this one (up to max(N, K)): all of them, and
           -- those after the breaker last tripped.
           COALESCE(min(prev.rn) FILTER (WHERE NOT prev.failed) - 1, count(prev.rn))
               AS failed_before,
           COALESCE(min(prev.rn) FILTER (WHERE NOT prev.failed
                                          OR prev.scheduled_for <= e.breaker_tripped_for) - 1,
                    count(prev.rn)) AS failed_since_trip
      FROM e
      LEFT JOIN LATERAL (
            SELECT p.state IN ('dead', 'timed_out') AS failed, p.scheduled_for,
                   row_number() OVER (ORDER BY p.scheduled_for DESC) AS rn
              FROM dispatch_execution p
             WHERE e.state <> 'succeeded'
               AND p.schedule_id = e.schedule_id
               AND p.scheduled_for < e.scheduled_for
               AND p.state IN ('dead', 'timed_out', 'succeeded')
             ORDER BY p.scheduled_for DESC
             LIMIT greatest(e.threshold, e.auto_pause_after)) prev ON true
     GROUP BY e.id, e.tenant_id, e.schedule_id, e.scheduled_for, e.state, e.reason_code,
              e.reason, e.attempts, e.finished_at, e.schedule_name, e.alert_failing, e.paused,
              e.snoozed, e.breaker_tripped_for, e.tenant_slug, e.threshold, e.recovery,
              e.realert_s, e.auto_pause_after, e.has_channel
), owed AS (
    SELECT st.*,
           CASE
             WHEN NOT st.has_channel OR st.snoozed THEN NULL
             WHEN st.state = 'succeeded' THEN
               CASE WHEN st.alert_failing AND st.recovery THEN 'recovery' END
             WHEN st.failed_before = st.threshold - 1 THEN 'failure'
             WHEN st.failed_before >= st.threshold AND st.realert_s > 0
                  AND NOT EXISTS (
                        SELECT 1 FROM dispatch_alert a
                         WHERE a.schedule_id = st.schedule_id AND a.kind = 'failure'
                           AND a.created_at > now() - make_interval(secs => st.realert_s))
               THEN 'failure'
           END AS kind,
           st.state <> 'succeeded' AND st.auto_pause_after > 0 AND NOT st.paused
               AND st.failed_since_trip = st.auto_pause_after - 1 AS pause_now,
           left('auto-paused after ' || st.auto_pause_after || ' consecutive failures; last error: '
                || COALESCE(NULLIF(st.reason, ''), st.reason_code, st.state), 500) AS pause_reason
      FROM streaks st
), inserted AS (
    INSERT INTO dispatch_alert (id, tenant_id, schedule_id, execution_id, scheduled_for, kind,
                                payload, state, attempts, next_attempt_at, delivered, last_error,
                                held_by, created_at)
    SELECT gen_random_uuid(), o.tenant_id, o.schedule_id, o.id, o.scheduled_for, k.kind,
           jsonb_build_object(
               'tenant', o.tenant_slug,
               'schedule_id', o.schedule_id,
               'schedule_name', o.schedule_name,
               'execution_id', o.id,
               'scheduled_for', o.scheduled_for,
               'state', o.state,
               'consecutive_failures', CASE WHEN o.state <> 'succeeded' THEN o.failed_before + 1 END,
               'threshold', o.threshold,
               'attempts', o.attempts,
               'reason_code', o.reason_code,
               'reason', o.reason,
               'pause_note', CASE WHEN k.kind = 'auto_paused' THEN o.pause_reason END,
               'finished_at', o.finished_at),
           'pending', 0, now(), '[]'::jsonb, '', '', now()
      FROM owed o
     CROSS JOIN LATERAL (
            SELECT o.kind WHERE o.kind IS NOT NULL
            UNION ALL
            SELECT 'auto_paused' WHERE o.pause_now AND o.has_channel AND NOT o.snoozed) k
    ON CONFLICT (schedule_id, scheduled_for, kind) DO NOTHING
    RETURNING id, schedule_id, execution_id, kind
), flags AS (
    SELECT o.schedule_id,
           bool_or(i.kind = 'failure') AS failure_alerted,
           bool_or(o.state = 'succeeded' AND o.alert_failing) AS recovered,
           bool_or(o.pause_now) AS pause,
           max(o.pause_reason) FILTER (WHERE o.pause_now) AS pause_reason,
           max(o.scheduled_for) FILTER (WHERE o.pause_now) AS tripped_for,
           (array_agg(o.id) FILTER (WHERE o.pause_now))[1] AS pause_execution
      FROM owed o
      LEFT JOIN inserted i ON i.execution_id = o.id
     GROUP BY o.schedule_id
), updated AS (
    -- One update per schedule: failing from a failure alert on, no longer after the
    -- first success; the breaker's pause (left as it is if someone paused it first).
    UPDATE dispatch_schedule s
       SET alert_failing = CASE WHEN f.failure_alerted THEN true
                                WHEN f.recovered THEN false
                                ELSE s.alert_failing END,
           paused = s.paused OR f.pause,
           paused_at = CASE WHEN f.pause AND NOT s.paused THEN now() ELSE s.paused_at END,
           paused_until = CASE WHEN f.pause AND NOT s.paused THEN NULL ELSE s.paused_until END,
           paused_reason = CASE WHEN f.pause AND NOT s.paused THEN f.pause_reason
                                ELSE s.paused_reason END,
           paused_by = CASE WHEN f.pause AND NOT s.paused THEN 'alerts (auto-pause)'
                            ELSE s.paused_by END,
           breaker_tripped_for = CASE WHEN f.pause THEN f.tripped_for
                                      ELSE s.breaker_tripped_for END,
           version = s.version + CASE WHEN f.pause AND NOT s.paused THEN 1 ELSE 0 END
      FROM flags f
     WHERE s.id = f.schedule_id AND (f.failure_alerted OR f.recovered OR f.pause)
 RETURNING s.id, s.tenant_id, f.pause, f.pause_reason, f.pause_execution
), pause_event AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT u.tenant_id, u.id, u.pause_execution, 'paused', u.pause_reason,
           jsonb_build_object('reason', u.pause_reason, 'until', NULL, 'auto', true),
           'alerts (auto-pause)'
      FROM updated u
     WHERE u.pause
)
SELECT id FROM inserted

-- name: alert_claim
-- Take due pending alerts for one delivery attempt, fairly across tenants: those of the %(tenants)s tenants whose oldest due alert is oldest (none of %(busy)s, whose alerts the claimer is still sending), at most %(per_tenant)s of each; the claim pushes next_attempt_at out by a lease that outlasts the claimer's worst case, so a slow send is not taken up twice and an alert whose sender died is taken up again then (at most one duplicate).
-- The lease: %(lease_s)s for the claimer's own work, plus one deadline (%(send_s)s)
-- per send it may make, one after another — the tenant's claimed alerts times its
-- enabled channels (a policy's channels are some of those). `due` reads the pending
-- alerts that are due (the alert_pending index): few, unless channels are failing.
WITH due AS (
    SELECT id, tenant_id, next_attempt_at,
           row_number() OVER (PARTITION BY tenant_id ORDER BY next_attempt_at, id) AS nth
      FROM dispatch_alert
     WHERE state = 'pending' AND next_attempt_at <= now()
       AND tenant_id <> ALL(%(busy)s::bigint[])
), oldest AS (
    SELECT tenant_id
      FROM due
     WHERE nth = 1
     ORDER BY next_attempt_at, id
     LIMIT %(tenants)s
), picked AS (
    -- Checked again on the row: another claimer may have taken it since `due` looked.
    SELECT a.id, a.tenant_id
      FROM dispatch_alert a
      JOIN due d ON d.id = a.id
      JOIN oldest o ON o.tenant_id = d.tenant_id
     WHERE d.nth <= %(per_tenant)s
       AND a.state = 'pending' AND a.next_attempt_at <= now()
       FOR UPDATE OF a SKIP LOCKED
), sends AS (
    SELECT p.tenant_id,
           count(*) * greatest(1, (SELECT count(*) FROM dispatch_alertchannel c
                                    WHERE c.tenant_id = p.tenant_id AND c.enabled)) AS sends
      FROM picked p
     GROUP BY p.tenant_id
)
UPDATE dispatch_alert a
   SET attempts = a.attempts + 1,
       next_attempt_at = now() + make_interval(secs => %(lease_s)s + s.sends * %(send_s)s)
  FROM picked p
  JOIN sends s ON s.tenant_id = p.tenant_id
 WHERE a.id = p.id
RETURNING a.id, a.tenant_id, a.schedule_id, a.execution_id, a.kind, a.payload, a.attempts,
          a.delivered, a.held_by

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

-- name: lateness_watchers
-- The tenants (of tenant %(tenant_id)s only; NULL: of any) with a policy that sets either lateness limit: the one definition of who is watched. Asked before late_occurrences, which is not run when no tenant is (the common case) and otherwise looks only at these. Planning that statement costs 35-290 ms (its joins over every day partition of the executions), and the late scan runs every CONTROL_INTERVAL_S on every beat.
SELECT DISTINCT tenant_id FROM dispatch_alertpolicy
 WHERE (late_after_s > 0 OR max_duration_s > 0)
   AND (%(tenant_id)s::bigint IS NULL OR tenant_id = %(tenant_id)s::bigint)

-- name: late_occurrences
-- The dead-man rule, one definition for the late scan (dispatch/alerting/lateness.py) and the dashboard's "late now": an occurrence since %(since)s (the last day) not started within late_after_s of its due time (held, queued, never claimed), or running past max_duration_s, of a live, unpaused schedule whose policy has either limit (0 = off: nothing is late).
-- %(tenants)s: the tenants to look at, those lateness_watchers returned; %(for_alerts)s keeps only the occurrences an alert is owed for (schedule not snoozed, an enabled channel, not alerted yet); the %(batch)s longest-late first.
WITH pol AS (
    SELECT s.id AS schedule_id, s.tenant_id, s.name AS schedule_name,
           p.late_after_s, p.max_duration_s
      FROM unnest(%(tenants)s::bigint[]) AS lt(tenant_id)
      JOIN dispatch_schedule s ON s.tenant_id = lt.tenant_id
      JOIN tenants_tenant t ON t.id = s.tenant_id
     CROSS JOIN LATERAL (
            SELECT late_after_s, max_duration_s
              FROM dispatch_alertpolicy p
             WHERE p.tenant_id = s.tenant_id
               AND (p.schedule_id = s.id OR p.schedule_id IS NULL)
             ORDER BY p.schedule_id NULLS LAST
             LIMIT 1) p
     WHERE s.deleted_at IS NULL AND NOT s.paused AND t.active
       AND (p.late_after_s > 0 OR p.max_duration_s > 0)
       AND (NOT %(for_alerts)s
            OR ((s.alert_snoozed_until IS NULL OR s.alert_snoozed_until <= now())
                AND EXISTS (SELECT 1 FROM dispatch_alertchannel c
                             WHERE c.tenant_id = s.tenant_id AND c.enabled)))
)
SELECT pol.schedule_id, pol.tenant_id, pol.schedule_name,
       x.id AS execution_id, x.scheduled_for, x.state, x.due_at, x.started_at,
       x.started_at IS NULL AS not_started,
       CASE WHEN x.started_at IS NULL THEN pol.late_after_s ELSE pol.max_duration_s END AS limit_s
  FROM pol
  JOIN dispatch_execution x ON x.schedule_id = pol.schedule_id
 -- A parameter, not now() - interval '1 day': a value known at planning prunes the older
 -- day partitions there (a stable now() is pruned only when the plan starts, after every
 -- partition was planned).
 WHERE x.scheduled_for > %(since)s::timestamptz
   -- The active rows only: the execution_active_schedule partial index's condition,
   -- so each schedule is one probe of it, not a walk over its day of finished runs.
   AND x.state IN ('scheduled', 'queued', 'running', 'retry_scheduled')
   AND ((pol.late_after_s > 0 AND x.started_at IS NULL
         AND x.state IN ('scheduled', 'queued', 'retry_scheduled')
         AND x.due_at < now() - make_interval(secs => pol.late_after_s))
        OR (pol.max_duration_s > 0 AND x.state = 'running'
            AND x.started_at < now() - make_interval(secs => pol.max_duration_s)))
   AND (NOT %(for_alerts)s
        OR NOT EXISTS (SELECT 1 FROM dispatch_alert a
                        WHERE a.schedule_id = x.schedule_id AND a.scheduled_for = x.scheduled_for
                          AND a.kind = 'late'))
 ORDER BY COALESCE(x.started_at, x.due_at), x.id
 LIMIT %(batch)s

-- name: alert_late_insert
-- The late alerts for the occurrences late_occurrences found (as it saw them), one per occurrence (the sender adds the explainer's reason); returns the new ones.
INSERT INTO dispatch_alert (id, tenant_id, schedule_id, execution_id, scheduled_for, kind, payload,
                            state, attempts, next_attempt_at, delivered, last_error, held_by,
                            created_at)
SELECT gen_random_uuid(), s.tenant_id, s.id, x.id, x.scheduled_for, 'late',
       jsonb_build_object(
           'tenant', t.slug,
           'schedule_id', s.id,
           'schedule_name', s.name,
           'execution_id', x.id,
           'scheduled_for', x.scheduled_for,
           'state', l.state,
           'late', CASE WHEN l.not_started THEN 'not_started' ELSE 'overrun' END,
           'due_at', l.due_at,
           'started_at', l.started_at,
           'limit_s', l.limit_s),
       'pending', 0, now(), '[]'::jsonb, '', '', now()
  FROM unnest(%(execution_ids)s::uuid[], %(states)s::text[], %(not_started)s::bool[],
              %(due_ats)s::timestamptz[], %(started_ats)s::timestamptz[], %(limits)s::int[])
       AS l(execution_id, state, not_started, due_at, started_at, limit_s)
  JOIN dispatch_execution x ON x.id = l.execution_id
  JOIN dispatch_schedule s ON s.id = x.schedule_id
  JOIN tenants_tenant t ON t.id = s.tenant_id
ON CONFLICT (schedule_id, scheduled_for, kind) DO NOTHING
RETURNING id

-- name: alert_hold
-- Hold a claimed alert until its tenant's maintenance window ends: not a delivery try (attempts back), remembered for the summary.
UPDATE dispatch_alert
   SET attempts = attempts - 1,
       next_attempt_at = %(until)s,
       held_by = %(window)s::text
 WHERE id = %(id)s::uuid

-- name: alert_decide_missed
-- Missed (dead-man of the scheduler itself): in the firing transaction that recorded a schedule's occurrences found beyond the misfire grace (the beats were not firing), one `missed` alert per schedule and outage, deduplicated on the newest missed occurrence.
-- One row per schedule in the arrays (count, skipped, first and newest missed
-- occurrence); sent when the effective policy (the schedule's, else the tenant's)
-- watches lateness (late_after_s > 0), the tenant has an enabled channel and the
-- schedule is not snoozed. The execution linked is the newest missed occurrence's
-- (fired late, or recorded skipped), found by its unique (schedule, scheduled_for).
-- A schedule resumed since the first missed occurrence was paused, not left unfired:
-- its misfires are the pause's (the explainer says so), and owe no alert.
INSERT INTO dispatch_alert (id, tenant_id, schedule_id, execution_id, scheduled_for, kind,
                            payload, state, attempts, next_attempt_at, delivered, last_error,
                            held_by, created_at)
SELECT gen_random_uuid(), s.tenant_id, s.id, x.id, m.last, 'missed',
       jsonb_build_object(
           'tenant', t.slug,
           'schedule_id', s.id,
           'schedule_name', s.name,
           'execution_id', x.id,
           'scheduled_for', m.last,
           'state', x.state,
           'missed', m.missed,
           'skipped', m.skipped,
           'caught_up', m.missed - m.skipped,
           'first', m.first,
           'last', m.last,
           'misfire', s.misfire,
           'grace_s', s.misfire_grace_s),
       'pending', 0, now(), '[]'::jsonb, '', '', now()
  FROM unnest(%(schedule_ids)s::uuid[], %(missed)s::int[], %(skipped)s::int[],
              %(firsts)s::timestamptz[], %(lasts)s::timestamptz[])
           AS m(schedule_id, missed, skipped, first, last)
  JOIN dispatch_schedule s ON s.id = m.schedule_id
  JOIN tenants_tenant t ON t.id = s.tenant_id
  JOIN dispatch_execution x ON x.schedule_id = m.schedule_id AND x.scheduled_for = m.last
 CROSS JOIN LATERAL (
        SELECT late_after_s
          FROM dispatch_alertpolicy p
         WHERE p.tenant_id = s.tenant_id
           AND (p.schedule_id = s.id OR p.schedule_id IS NULL)
         ORDER BY p.schedule_id NULLS LAST
         LIMIT 1) p
 WHERE p.late_after_s > 0
   AND (s.alert_snoozed_until IS NULL OR s.alert_snoozed_until <= now())
   AND EXISTS (SELECT 1 FROM dispatch_alertchannel c
                WHERE c.tenant_id = s.tenant_id AND c.enabled)
   AND NOT EXISTS (SELECT 1 FROM dispatch_executionevent ev
                    WHERE ev.schedule_id = s.id AND ev.at >= m.first AND ev.kind = 'resumed')
ON CONFLICT (schedule_id, scheduled_for, kind) DO NOTHING
RETURNING id
