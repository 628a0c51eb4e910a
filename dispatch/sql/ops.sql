-- Platform figures for operators: /metrics (dispatch/ops/metrics.py) and the ops page
-- (dispatch/selectors/ops.py). Read-only, across tenants. Windows arrive as seconds and
-- the excluded triggers as an array, so nothing is formatted into the SQL text.

-- name: metrics_lag
-- Lag histogram over the window of `measure` - due_at ('fire': enqueued_at, 'start': started_at): cumulative counts per bucket (lag <= bound), count and sum.
-- One branch per measure, each a range on its own column against statement_timestamp()
-- (stable, unlike clock_timestamp()): a range scan of execution_enqueued_at or
-- execution_started_at, not the whole table on every scrape. The branch of the other
-- measure is a one-time filter that is false: it reads nothing.
WITH recent AS (
    SELECT EXTRACT(EPOCH FROM (e.enqueued_at - e.due_at)) AS lag
    FROM dispatch_execution e
    WHERE %(measure)s::text <> 'start'
      AND e.enqueued_at >= statement_timestamp() - make_interval(secs => %(window_s)s)
      AND e.trigger <> ALL(%(excluded)s::text[])
    UNION ALL
    SELECT EXTRACT(EPOCH FROM (e.started_at - e.due_at)) AS lag
    FROM dispatch_execution e
    WHERE %(measure)s::text = 'start'
      AND e.started_at >= statement_timestamp() - make_interval(secs => %(window_s)s)
      AND e.trigger <> ALL(%(excluded)s::text[])
)
SELECT ARRAY(SELECT (SELECT count(*) FROM recent r WHERE r.lag <= b.bound)
             FROM unnest(%(buckets)s::numeric[]) WITH ORDINALITY AS b(bound, n) ORDER BY b.n) AS counts,
       (SELECT count(*) FROM recent) AS total,
       (SELECT COALESCE(sum(lag), 0) FROM recent) AS lag_sum

-- name: metrics_executions_by_state
-- Executions per tenant and state, scheduled within the window.
SELECT t.slug, e.state, count(*) AS n
FROM dispatch_execution e
JOIN tenants_tenant t ON t.id = e.tenant_id
WHERE e.scheduled_for >= statement_timestamp() - make_interval(secs => %(window_s)s)
GROUP BY 1, 2

-- name: metrics_tenant_inflight
-- Each active tenant's concurrency cap and its in-flight (queued + running) executions.
-- The states are literal, as in the partial index execution_inflight_tenant they must match.
SELECT t.slug, q.max_concurrent,
       (SELECT count(*) FROM dispatch_execution e
         WHERE e.tenant_id = t.id AND e.state IN ('queued', 'running')) AS inflight
FROM tenants_tenant t
JOIN tenants_tenantquota q ON q.tenant_id = t.id
WHERE t.active

-- name: metrics_beats
-- Beats with a heartbeat within the window (and those of them standing by after a publish
-- stall), and the fleet's fencing rejections, publishes and hand-overs.
SELECT count(*) FILTER (WHERE stopped_at IS NULL
                          AND heartbeat_at > clock_timestamp() - make_interval(secs => %(alive_s)s)) AS alive,
       count(*) FILTER (WHERE stopped_at IS NULL AND standby_since IS NOT NULL
                          AND heartbeat_at > clock_timestamp() - make_interval(secs => %(alive_s)s)) AS standby,
       COALESCE(sum(stale_writes_rejected), 0) AS rejected,
       COALESCE(sum(published_total), 0) AS published,
       COALESCE(sum(handovers_total), 0) AS handovers
FROM dispatch_beatnode

-- name: metrics_partitions
-- Partition takeovers so far (the sum of epochs) and partitions with an owner.
SELECT COALESCE(sum(epoch), 0) AS epochs, count(*) FILTER (WHERE owner <> '') AS owned
FROM dispatch_schedulerpartition

-- name: metrics_events_by_kind
-- Execution events per kind within the window.
SELECT kind, count(*) AS n FROM dispatch_executionevent
WHERE at >= statement_timestamp() - make_interval(secs => %(window_s)s)
GROUP BY 1

-- name: ops_fire_lag
-- p50 / p99 / max of enqueued_at - due_at (seconds) for executions published since `since`,
-- without the excluded triggers, and how many of those were left out.
SELECT count(*) FILTER (WHERE timed) AS timed,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) FILTER (WHERE timed) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) FILTER (WHERE timed) AS p99,
       max(lag) FILTER (WHERE timed) AS worst,
       count(*) FILTER (WHERE NOT timed) AS excluded
FROM (SELECT EXTRACT(EPOCH FROM (enqueued_at - due_at)) AS lag,
             trigger <> ALL(%(excluded)s::text[]) AS timed
      FROM dispatch_execution
      WHERE enqueued_at IS NOT NULL AND enqueued_at >= %(since)s) AS l
