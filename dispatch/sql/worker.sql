-- Worker and sweeper statements: claim, heartbeat, fenced completion, lease sweep.
-- Every write after the claim is conditional on the fencing token the claim
-- returned: a worker that lost its lease (swept, cancelled, paused past it)
-- matches no row, and its write is recorded as rejected instead of applied.

-- name: claim_execution
-- Claim the execution named by a message if that attempt is current and due (DB clock); bumps the token and
-- writes `claimed` and, when the attempt will be run (schedule live, tenant active, a target type this worker
-- knows), `attempt_started` — one round trip for the claim and both events (issue 19: two per run).
-- `attempt_base`: the attempt a re-run's chain started after (0 for the first chain).
WITH claimed AS (
    UPDATE dispatch_execution
       SET state = 'running',
           lease_owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(lease_s)s),
           fencing_token = fencing_token + 1,
           started_at = now(),
           next_attempt_at = NULL
     WHERE id = %(id)s::uuid
       -- The occurrence's millisecond, which the id carries (dispatch/history/ids.py):
       -- one day partition is planned and probed instead of every one.
       AND scheduled_for >= %(lo)s::timestamptz AND scheduled_for < %(hi)s::timestamptz
       AND state IN ('scheduled', 'queued', 'retry_scheduled')
       AND attempt = %(attempt)s
       AND COALESCE(next_attempt_at, due_at) <= now()
 RETURNING id, tenant_id, schedule_id, attempt, attempt_base, reruns, fencing_token, scheduled_for,
           target_override, trigger, counted
), info AS (
    -- A re-run with an edited target runs that target (and its timeout) this once.
    SELECT c.id AS execution_id, c.attempt, c.attempt_base, c.reruns, c.fencing_token, c.scheduled_for,
           s.id AS schedule_id, s.name AS schedule_name,
           COALESCE(c.target_override, s.target) AS target, s.retry,
           COALESCE((c.target_override->>'timeout_s')::int, s.timeout_s) AS timeout_s,
           s.deleted_at IS NOT NULL AS schedule_deleted,
           t.id AS tenant_id, t.slug AS tenant_slug, t.signing_key, t.egress_allow, t.active AS tenant_active,
           EXISTS (SELECT 1 FROM dispatch_schedule_depends_on link WHERE link.to_schedule_id = c.schedule_id)
               AS has_dependents,
           s.alert_failing,
           -- max_runs (dispatch/lifecycle.py): whether a success must be counted, and a
           -- timed occurrence (or a dependent's, fired by its upstream) published before the
           -- schedule completed, not yet run: not run (a manual run, a re-run or a backfill
           -- was asked for as it is and still runs).
           s.max_runs IS NOT NULL AS counts_runs, c.counted,
           (s.max_runs IS NOT NULL AND s.runs_succeeded >= s.max_runs
            AND c.trigger IN ('cron', 'api', 'catch_up', 'dependency') AND c.reruns = 0) AS schedule_completed,
           s.max_runs
      FROM claimed c
      JOIN dispatch_schedule s ON s.id = c.schedule_id
      JOIN tenants_tenant t ON t.id = c.tenant_id
), started AS (
    SELECT i.*, (NOT i.schedule_deleted AND i.tenant_active AND NOT i.schedule_completed
                 AND (i.target->>'type') = ANY(%(kinds)s::text[])) AS started
      FROM info i
), event AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT s.tenant_id, s.schedule_id, s.execution_id, ev.kind, ev.message, ev.data, %(owner)s
      FROM started s
     CROSS JOIN LATERAL (VALUES
         (1, 'claimed',
          'claimed by worker ' || %(owner)s || ' with token ' || s.fencing_token,
          jsonb_build_object('worker', %(owner)s, 'fencing_token', s.fencing_token, 'attempt', s.attempt)),
         (2, 'attempt_started',
          -- The words of dispatch/targets/runtime.py's attempt_label.
          'attempt ' || s.attempt
              || CASE WHEN s.attempt_base > 0
                      THEN ' (re-run, try ' || (s.attempt - s.attempt_base) || ')' ELSE '' END
              || ' started by ' || %(owner)s
              || ' (timeout ' || s.timeout_s || ' s)',
          jsonb_build_object('attempt', s.attempt, 'fencing_token', s.fencing_token,
                             'target', s.target->>'type', 'timeout_s', s.timeout_s))
     ) AS ev(ord, kind, message, data)
     WHERE ev.kind = 'claimed' OR s.started
     ORDER BY ev.ord
)
SELECT * FROM started

-- name: peek_execution
-- Why a message claimed nothing: the row's state, attempt, token and seconds until it is due (DB clock).
SELECT state, attempt, fencing_token, lease_owner,
       EXTRACT(EPOCH FROM (COALESCE(next_attempt_at, due_at) - now()))::float8 AS due_in_s,
       tenant_id, schedule_id
  FROM dispatch_execution
 WHERE id = %(id)s::uuid

-- name: heartbeat
-- Extend the lease only while this worker's token is current and the row still running (a row back: extended).
UPDATE dispatch_execution
   SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
 WHERE id = %(id)s::uuid
   AND scheduled_for = %(scheduled_for)s::timestamptz  -- the claim's: one partition
   AND fencing_token = %(token)s
   AND state = 'running'
RETURNING id

-- name: insert_event
-- Append one event to an execution's timeline.
INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
VALUES (%(tenant_id)s, %(schedule_id)s::uuid, %(id)s::uuid, %(kind)s, %(message)s, %(data)s::jsonb, %(actor)s)
RETURNING id

-- name: finish_attempt
-- Record an attempt's end (succeeded / retry_scheduled / dead / cancelled / skipped / held) with its events, only
-- under the caller's token. `count` (a first success of an occurrence of a schedule with max_runs, decided from the
-- claim) also counts it, and the success that reaches max_runs completes the schedule, in the same round trip.
WITH done AS (
    UPDATE dispatch_execution
       SET state = %(state)s::text,
           attempt = attempt + %(attempt_inc)s,
           next_attempt_at = CASE WHEN %(state)s::text = 'retry_scheduled'
                                  THEN now() + make_interval(secs => %(delay_s)s) END,
           finished_at = CASE WHEN %(state)s::text IN ('succeeded', 'dead', 'cancelled', 'skipped')
                              THEN now() END,
           -- Set once, never cleared (a re-run keeps it): the occurrence has been counted.
           counted = counted OR %(count)s::boolean,
           lease_expires_at = NULL,
           status_code = %(status_code)s,
           exit_code = %(exit_code)s,
           error = %(error)s,
           log_excerpt = %(log_excerpt)s,
           -- The target's result (a completion callback's); a worker's finish has none.
           output = COALESCE(%(output)s::jsonb, output),
           reason_code = %(reason_code)s,
           reason = %(reason)s
     WHERE id = %(id)s::uuid
       AND scheduled_for = %(scheduled_for)s::timestamptz  -- the claim's: one partition
       AND fencing_token = %(token)s
       AND state = 'running'
 RETURNING id, tenant_id, schedule_id, backfill_id
), woken AS (
    -- A backfill's run ended: the pump's backfill step (LISTEN dispatch_backfill,
    -- dispatch/services/common.py BACKFILL_WAKE_CHANNEL) may release the next one now.
    -- Delivered at commit; a row of no backfill notifies nothing.
    SELECT pg_notify('dispatch_backfill', d.backfill_id::text)
      FROM done d
     WHERE d.backfill_id IS NOT NULL
       AND %(state)s::text IN ('succeeded', 'dead', 'cancelled', 'skipped')
), logged AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT d.tenant_id, d.schedule_id, d.id, ev.e->>'kind', ev.e->>'message', ev.e->'data', %(actor)s
      FROM done d
     CROSS JOIN jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS ev(e, ord)
     ORDER BY ev.ord
), tally AS (
    -- A counter, not a count(*) of succeeded rows: O(1) per success however long the
    -- history (and retention may delete counted rows), and a re-run that fails after
    -- succeeding does not un-count. Correct under at-least-once: only the fenced finish
    -- of a running attempt gets here (a duplicate message claims nothing), and
    -- `counted` stops a second success of the same occurrence. Across concurrent
    -- workers the schedule row's lock orders the increments and each re-reads the row
    -- it updates (READ COMMITTED re-check), so N successes add exactly N.
    UPDATE dispatch_schedule s
       SET runs_succeeded = s.runs_succeeded + 1,
           completed_at = CASE WHEN s.runs_succeeded + 1 = s.max_runs THEN now() ELSE s.completed_at END,
           next_run_at = CASE WHEN s.runs_succeeded + 1 >= s.max_runs THEN NULL ELSE s.next_run_at END
      FROM done d
     WHERE %(count)s::boolean AND s.id = d.schedule_id AND s.max_runs IS NOT NULL
 RETURNING s.id, s.tenant_id, s.max_runs, s.runs_succeeded = s.max_runs AS reached
), withdrawn AS (
    -- What the beat staged ahead and has not published (services/schedules.py
    -- withdraw_staged's filter): gone, as for a pause. A row the beat admits first is
    -- no longer `scheduled` when this re-checks it; one staged by a beat transaction
    -- this statement cannot see yet is skipped at its claim (`schedule_completed`).
    DELETE FROM dispatch_execution e
     USING tally t
     WHERE t.reached AND e.schedule_id = t.id
       AND e.state = 'scheduled' AND e.attempt = 1 AND e.attempt_base = 0 AND e.enqueued_at IS NULL
       AND e.trigger IN ('cron', 'api', 'catch_up')
 RETURNING e.id, e.scheduled_for
), unlogged AS (
    DELETE FROM dispatch_executionevent ev USING withdrawn w WHERE ev.execution_id = w.id
), completed AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT t.tenant_id, t.id, NULL, 'completed',
           'completed: reached max_runs ' || t.max_runs || ' (' || w.n || ' staged occurrence'
               || CASE WHEN w.n = 1 THEN '' ELSE 's' END || ' withdrawn)',
           jsonb_build_object('reason', 'max_runs', 'max_runs', t.max_runs, 'execution_id', d.id,
                              'withdrawn', w.at, 'withdrawn_total', w.n),
           %(actor)s
      FROM tally t
      JOIN done d ON d.schedule_id = t.id
     CROSS JOIN (SELECT count(*) AS n,
                        COALESCE(jsonb_agg(to_jsonb(scheduled_for) ORDER BY scheduled_for), '[]') AS at
                   FROM withdrawn) w
     WHERE t.reached
)
-- The update decides whether the write applied, with or without events to log
-- (`woken` is read so that it runs: a plain SELECT in a WITH runs only when used).
SELECT d.id FROM done d, (SELECT count(*) FROM woken) AS w

-- name: record_fencing_rejected
-- A stale writer's heartbeat or completion matched no row: record it against the row's current token, never apply it.
INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
SELECT tenant_id, schedule_id, id, %(kind)s,
       'the ' || %(what)s || ' of worker ' || %(owner)s || ' (token ' || %(token)s
           || ') was rejected: the execution now has token ' || fencing_token || ' (' || state || ')',
       %(data)s::jsonb || jsonb_build_object('current_token', fencing_token, 'current_state', state),
       %(owner)s
  FROM dispatch_execution
 WHERE id = %(id)s::uuid AND scheduled_for = %(scheduled_for)s::timestamptz
RETURNING (data->>'current_token')::bigint AS current_token, data->>'current_state' AS current_state

-- name: hold_rate_limit
-- Hand a claimed attempt back until its reserved rate-limit slot, not consumed (same
-- attempt, next_attempt_at = the slot), under the caller's token. The timeline keeps
-- one `held_rate_limit` entry per execution: a further hold bumps its count.
WITH done AS (
    UPDATE dispatch_execution
       SET state = 'retry_scheduled',
           next_attempt_at = now() + make_interval(secs => %(delay_s)s),
           lease_expires_at = NULL,
           started_at = NULL,
           reason_code = 'held_rate_limit',
           reason = %(reason)s
     WHERE id = %(id)s::uuid
       AND scheduled_for = %(scheduled_for)s::timestamptz  -- the claim's: one partition
       AND fencing_token = %(token)s
       AND state = 'running'
 RETURNING id, tenant_id, schedule_id
), bumped AS (
    UPDATE dispatch_executionevent ev
       SET data = ev.data || jsonb_build_object(
                'count', COALESCE((ev.data->>'count')::int, 1) + 1,
                'waited_s', round((COALESCE((ev.data->>'waited_s')::numeric, 0) + %(delay_s)s)::numeric, 3),
                'delay_s', round(%(delay_s)s::numeric, 3),
                'attempt', %(attempt)s),
           message = left(%(message)s || ' (held ' || (COALESCE((ev.data->>'count')::int, 1) + 1)
                          || ' times)', 1000)
      FROM done d
     WHERE ev.execution_id = d.id AND ev.kind = 'held_rate_limit'
 RETURNING ev.id
), unstarted AS (
    -- The claim wrote `attempt_started` ahead (its own round trip saved); a hand-back did not start it.
    DELETE FROM dispatch_executionevent ev
     USING done d
     WHERE ev.execution_id = d.id AND ev.kind = 'attempt_started'
       AND (ev.data->>'fencing_token')::bigint = %(token)s
), added AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT d.tenant_id, d.schedule_id, d.id, 'held_rate_limit', left(%(message)s, 1000),
           %(data)s::jsonb || jsonb_build_object('count', 1, 'waited_s', round(%(delay_s)s::numeric, 3)),
           %(actor)s
      FROM done d
     WHERE NOT EXISTS (SELECT 1 FROM bumped)
)
SELECT id FROM done

-- name: lease_check
-- Just before the call, only when the claim's own reply came late (else the claim is the check): the claim's
-- token is still current and its lease unexpired (DB clock); renews the lease for a full term.
UPDATE dispatch_execution
   SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
 WHERE id = %(id)s
   AND scheduled_for = %(scheduled_for)s::timestamptz  -- the claim's: one partition
   AND fencing_token = %(token)s
   AND state = 'running'
   AND lease_expires_at > now()

-- name: connections_free
-- A threads-pool worker's start: how many more connections PostgreSQL accepts (its pool threads each keep one).
SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
       - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int

-- name: await_completion
-- A hand-off accepted (`"completion": "callback"`, dispatch/completion.py): the attempt stays running, held by
-- the target (lease_owner `callback:<worker>`) until its first heartbeat is due, never past its deadline
-- (started_at + timeout_s); the worker's slot is free. Under the claim's token, with its event.
WITH held AS (
    UPDATE dispatch_execution
       SET lease_owner = %(owner)s,
           lease_expires_at = LEAST(now() + make_interval(secs => %(heartbeat_s)s),
                                    started_at + make_interval(secs => %(timeout_s)s)),
           status_code = %(status_code)s,
           log_excerpt = %(log_excerpt)s
     WHERE id = %(id)s::uuid
       AND scheduled_for = %(scheduled_for)s::timestamptz  -- the claim's: one partition
       AND fencing_token = %(token)s
       AND state = 'running'
 RETURNING id, tenant_id, schedule_id, lease_expires_at
), logged AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT h.tenant_id, h.schedule_id, h.id, 'awaiting_completion', %(message)s,
           %(data)s::jsonb || jsonb_build_object('lease_expires_at', h.lease_expires_at), %(actor)s
      FROM held h
)
SELECT id, lease_expires_at FROM held

-- name: completion_attempt
-- The execution a completion callback names, as it is now, with what finishing it needs (the claim's
-- columns): the caller compares its attempt and token with the capability's.
SELECT e.id AS execution_id, e.attempt, e.attempt_base, e.reruns, e.fencing_token, e.scheduled_for,
       e.state, e.lease_owner, e.started_at, e.lease_expires_at,
       s.id AS schedule_id, s.name AS schedule_name,
       COALESCE(e.target_override, s.target) AS target, s.retry,
       COALESCE((e.target_override->>'timeout_s')::int, s.timeout_s) AS timeout_s,
       s.deleted_at IS NOT NULL AS schedule_deleted,
       t.id AS tenant_id, t.slug AS tenant_slug, t.signing_key, t.egress_allow,
       t.active AS tenant_active,
       EXISTS (SELECT 1 FROM dispatch_schedule_depends_on link WHERE link.to_schedule_id = e.schedule_id)
           AS has_dependents,
       s.alert_failing, s.max_runs IS NOT NULL AS counts_runs, e.counted, s.max_runs,
       -- As a claim reads them; a callback ends an attempt that was started already.
       false AS started, false AS schedule_completed
  FROM dispatch_execution e
  JOIN dispatch_schedule s ON s.id = e.schedule_id
  JOIN tenants_tenant t ON t.id = e.tenant_id
 WHERE e.id = %(id)s::uuid
   AND e.scheduled_for >= %(lo)s::timestamptz AND e.scheduled_for < %(hi)s::timestamptz

-- name: completion_heartbeat
-- The target's heartbeat for its attempt (under the capability's attempt and token): the lease runs
-- heartbeat_s more, never past the deadline; the attempt's one `target_heartbeat` entry is written or
-- updated with the count, the last progress and message (one row per attempt, however many beats).
WITH beat AS (
    UPDATE dispatch_execution
       SET lease_expires_at = LEAST(now() + make_interval(secs => %(heartbeat_s)s),
                                    started_at + make_interval(secs => %(timeout_s)s))
     WHERE id = %(id)s::uuid
       AND scheduled_for = %(scheduled_for)s::timestamptz
       AND attempt = %(attempt)s
       AND fencing_token = %(token)s
       AND state = 'running'
 RETURNING id, tenant_id, schedule_id, lease_expires_at
), bumped AS (
    UPDATE dispatch_executionevent ev
       SET data = ev.data || %(data)s::jsonb
                  || jsonb_build_object('count', COALESCE((ev.data->>'count')::int, 1) + 1,
                                        'last_at', now()),
           message = %(message)s
      FROM beat b
     WHERE ev.execution_id = b.id AND ev.kind = 'target_heartbeat'
       AND ev.at >= %(since)s::timestamptz  -- written after the attempt started: its partitions only
       AND (ev.data->>'fencing_token')::bigint = %(token)s
 RETURNING ev.id
), added AS (
    INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, kind, message, data, actor)
    SELECT b.tenant_id, b.schedule_id, b.id, 'target_heartbeat', %(message)s,
           %(data)s::jsonb || jsonb_build_object('count', 1, 'last_at', now(),
                                                 'fencing_token', %(token)s::bigint),
           %(actor)s
      FROM beat b
     WHERE NOT EXISTS (SELECT 1 FROM bumped)
)
SELECT id, lease_expires_at FROM beat

-- name: keep_attempt_log
-- An ended attempt's live log (dispatch/services/logs.py), as an event of its
-- execution: archived and dropped with the execution's history. Nothing when the
-- execution is gone.
INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, at, kind, message, data, actor)
SELECT e.tenant_id, e.schedule_id, e.id, now(), 'attempt_log', %(message)s, %(data)s::jsonb, %(actor)s
  FROM dispatch_execution e
 WHERE e.id = %(id)s::uuid
   AND e.scheduled_for >= %(lo)s::timestamptz AND e.scheduled_for < %(hi)s::timestamptz
RETURNING id
