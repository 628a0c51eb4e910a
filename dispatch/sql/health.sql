-- Schedule health (dispatch/selectors/health.py): one statement for a whole page of
-- schedules, each schedule's rows read through the (schedule_id, scheduled_for) unique
-- index with a bounded LATERAL, so a page costs the same at 50 or 5,000 schedules.
-- Only final outcomes count: %(ok)s is 'succeeded', %(bad)s the final failure
-- ('dead'); skipped and cancelled rows are neither (the selector documents why).

-- name: schedule_health
-- Per schedule of %(ids)s: the last run, the 24 h / 7 d / 30 d counts and nearest-rank
-- p50/p95 durations over the newest %(scan)s final rows of the last 30 days
-- (`sampled` when the cap cut the window), the failures since the last success, and the
-- newest alert sent (read through the alert_schedule_kind index's schedule prefix).
SELECT s.id AS schedule_id,
       last.state AS last_state, last.scheduled_for AS last_at, last.finished_at AS last_finished_at,
       w.runs_24h, w.ok_24h, w.p50_24h, w.p95_24h,
       w.runs_7d, w.ok_7d, w.p50_7d, w.p95_7d,
       w.runs_30d, w.ok_30d, w.p50_30d, w.p95_30d,
       w.sampled,
       streak.failures AS consecutive_failures, streak.capped AS streak_capped,
       lastok.scheduled_for AS last_success_at,
       alert.kind AS last_alert_kind, alert.sent_at AS last_alert_at
FROM unnest(%(ids)s::uuid[]) AS s(id)
LEFT JOIN LATERAL (
    SELECT e.state, e.scheduled_for, e.finished_at
    FROM dispatch_execution e
    WHERE e.schedule_id = s.id AND e.tenant_id = %(tenant_id)s AND e.scheduled_for <= %(now)s
      AND NOT (e.state = ANY(%(waiting)s::text[]))
    ORDER BY e.scheduled_for DESC
    LIMIT 1
) last ON true
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.scheduled_for >= %(since_24h)s) AS runs_24h,
           count(*) FILTER (WHERE r.ok AND r.scheduled_for >= %(since_24h)s) AS ok_24h,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY r.seconds)
               FILTER (WHERE r.scheduled_for >= %(since_24h)s) AS p50_24h,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY r.seconds)
               FILTER (WHERE r.scheduled_for >= %(since_24h)s) AS p95_24h,
           count(*) FILTER (WHERE r.scheduled_for >= %(since_7d)s) AS runs_7d,
           count(*) FILTER (WHERE r.ok AND r.scheduled_for >= %(since_7d)s) AS ok_7d,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY r.seconds)
               FILTER (WHERE r.scheduled_for >= %(since_7d)s) AS p50_7d,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY r.seconds)
               FILTER (WHERE r.scheduled_for >= %(since_7d)s) AS p95_7d,
           count(*) AS runs_30d,
           count(*) FILTER (WHERE r.ok) AS ok_30d,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY r.seconds) AS p50_30d,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY r.seconds) AS p95_30d,
           count(*) >= %(scan)s AS sampled
    FROM (
        SELECT e.scheduled_for, e.state = %(ok)s AS ok,
               EXTRACT(EPOCH FROM e.finished_at - e.started_at)::float8 AS seconds
        FROM dispatch_execution e
        WHERE e.schedule_id = s.id AND e.tenant_id = %(tenant_id)s
          AND e.state = ANY(ARRAY[%(ok)s, %(bad)s]::text[])
          AND e.scheduled_for >= %(since_30d)s AND e.scheduled_for <= %(now)s
        ORDER BY e.scheduled_for DESC
        LIMIT %(scan)s
    ) r
) w
LEFT JOIN LATERAL (
    SELECT e.scheduled_for
    FROM dispatch_execution e
    WHERE e.schedule_id = s.id AND e.tenant_id = %(tenant_id)s AND e.state = %(ok)s
      AND e.scheduled_for <= %(now)s
    ORDER BY e.scheduled_for DESC
    LIMIT 1
) lastok ON true
CROSS JOIN LATERAL (
    SELECT count(*) AS failures, count(*) >= %(scan)s AS capped
    FROM (
        SELECT 1
        FROM dispatch_execution e
        WHERE e.schedule_id = s.id AND e.tenant_id = %(tenant_id)s AND e.state = %(bad)s
          AND e.scheduled_for <= %(now)s
          AND e.scheduled_for > COALESCE(lastok.scheduled_for, '-infinity'::timestamptz)
        ORDER BY e.scheduled_for DESC
        LIMIT %(scan)s
    ) f
) streak
LEFT JOIN LATERAL (
    SELECT a.kind, a.sent_at
    FROM dispatch_alert a
    WHERE a.schedule_id = s.id AND a.tenant_id = %(tenant_id)s AND a.state = %(sent)s
    ORDER BY a.sent_at DESC
    LIMIT 1
) alert ON true

-- name: schedule_health_rank
-- The tenant's live schedules, least healthy first: most failures since the last
-- success, then most final failures in the last 24 h (read from the partial
-- "unsuccessful" index, not from every run), then name. A schedule the circuit breaker
-- paused (paused_by %(auto_actor)s) ranks as failing even when its failed runs are gone
-- (retention): it is failing until a person resumes it. Healthy schedules cost two
-- index probes each; the ranking is a triage view of %(limit)s rows, not paged.
SELECT s.id AS schedule_id, streak.failures AS consecutive_failures,
       COALESCE(day.failures, 0) AS failures_24h
FROM dispatch_schedule s
LEFT JOIN LATERAL (
    SELECT e.scheduled_for
    FROM dispatch_execution e
    WHERE e.schedule_id = s.id AND e.tenant_id = s.tenant_id AND e.state = %(ok)s
      AND e.scheduled_for <= %(now)s
    ORDER BY e.scheduled_for DESC
    LIMIT 1
) lastok ON true
CROSS JOIN LATERAL (
    SELECT count(*) AS failures
    FROM (
        SELECT 1
        FROM dispatch_execution e
        WHERE e.schedule_id = s.id AND e.tenant_id = s.tenant_id AND e.state = %(bad)s
          AND e.scheduled_for <= %(now)s
          AND e.scheduled_for > COALESCE(lastok.scheduled_for, '-infinity'::timestamptz)
        ORDER BY e.scheduled_for DESC
        LIMIT %(scan)s
    ) f
) streak
LEFT JOIN (
    SELECT e.schedule_id, count(*) AS failures
    FROM dispatch_execution e
    WHERE e.tenant_id = %(tenant_id)s AND e.state = %(bad)s
      AND e.scheduled_for >= %(since_24h)s AND e.scheduled_for <= %(now)s
    GROUP BY e.schedule_id
) day ON day.schedule_id = s.id
WHERE s.tenant_id = %(tenant_id)s AND s.deleted_at IS NULL
  AND (NOT %(failing_only)s OR streak.failures > 0
       OR (s.paused AND s.paused_by = %(auto_actor)s))
ORDER BY (streak.failures > 0 OR (s.paused AND s.paused_by = %(auto_actor)s)) DESC,
         streak.failures DESC, COALESCE(day.failures, 0) DESC, s.name, s.id
LIMIT %(limit)s

-- name: status_grid_cells
-- The newest %(per_schedule)s executions of each schedule of %(ids)s (one query for a
-- whole dashboard of rows), oldest first within a schedule.
SELECT c.*
FROM unnest(%(ids)s::uuid[]) AS s(id)
CROSS JOIN LATERAL (
    SELECT e.id, e.schedule_id, e.scheduled_for, e.state, e.reason_code, e.reason,
           e.status_code, e.exit_code, e.started_at, e.finished_at
    FROM dispatch_execution e
    WHERE e.schedule_id = s.id AND e.tenant_id = %(tenant_id)s AND e.scheduled_for <= %(until)s
    ORDER BY e.scheduled_for DESC
    LIMIT %(per_schedule)s
) c
ORDER BY c.schedule_id, c.scheduled_for

-- name: recently_active_schedules
-- The tenant's schedules with the newest executions, read from the newest %(scan)s
-- executions of the (tenant, scheduled_for) index: bounded however many schedules exist.
SELECT r.schedule_id, max(r.scheduled_for) AS last_at
FROM (
    SELECT e.schedule_id, e.scheduled_for
    FROM dispatch_execution e
    WHERE e.tenant_id = %(tenant_id)s AND e.scheduled_for <= %(now)s
    ORDER BY e.scheduled_for DESC, e.id DESC
    LIMIT %(scan)s
) r
JOIN dispatch_schedule s ON s.id = r.schedule_id AND s.deleted_at IS NULL
GROUP BY r.schedule_id
ORDER BY max(r.scheduled_for) DESC, r.schedule_id
LIMIT %(limit)s

-- name: activity_by_hour
-- Runs per hour of [%(since)s, %(now)s] by outcome, with the hour's p95 duration and
-- p95 fire lag (started_at - due_at), for the tenant or one schedule (%(schedule_id)s,
-- NULL: all). Reads the newest %(scan)s executions only, so a busy tenant's chart costs
-- a bounded index range; `read` (the same on every row) says how many were read.
WITH recent AS (
    SELECT e.scheduled_for, e.state, e.due_at, e.started_at, e.finished_at
    FROM dispatch_execution e
    WHERE e.tenant_id = %(tenant_id)s
      AND (%(schedule_id)s::uuid IS NULL OR e.schedule_id = %(schedule_id)s::uuid)
      AND e.scheduled_for >= %(since)s AND e.scheduled_for <= %(now)s
    ORDER BY e.scheduled_for DESC
    LIMIT %(scan)s
)
SELECT date_trunc('hour', r.scheduled_for) AS hour,
       count(*) FILTER (WHERE r.state = %(ok)s) AS ok,
       count(*) FILTER (WHERE r.state = ANY(%(bad)s)) AS bad,
       count(*) FILTER (WHERE r.state <> %(ok)s AND r.state <> ALL(%(bad)s)) AS other,
       percentile_disc(0.95) WITHIN GROUP (
           ORDER BY extract(epoch FROM r.finished_at - r.started_at)
       ) FILTER (WHERE r.finished_at IS NOT NULL AND r.started_at IS NOT NULL) AS p95_s,
       percentile_disc(0.95) WITHIN GROUP (
           ORDER BY extract(epoch FROM r.started_at - r.due_at)
       ) FILTER (WHERE r.started_at IS NOT NULL) AS lag_p95_s,
       (SELECT count(*) FROM recent) AS read
FROM recent r
GROUP BY 1
ORDER BY 1
