-- Statements of the beat (scheduler shard). Every write a beat makes happens in
-- a transaction that first ran fence_partitions, which key-share-locks the
-- partition rows it still owns at the epoch it was granted; a takeover (which
-- bumps the epoch, under FOR UPDATE) cannot commit in between, and a beat whose
-- epoch moved on gets fewer rows back and drops those partitions before writing
-- anything. Lease renewal (beat_keep, on the lease keeper's own connection) does
-- not wait for the fence: see fence_partitions.
--
-- Comparisons against an indexed column use statement_timestamp() (the clock
-- when the statement started), not clock_timestamp(): a volatile function
-- cannot be an index bound, and the due index would be read in full.
--
-- `numbers` is the beat's logical partitions (up to 1,024). Where they bound an index
-- scan it is `partition = ANY(numbers)`: one descent per element. Where a row found
-- otherwise (by id, by lease expiry) is tested for membership it is
-- `partition IN (SELECT unnest(numbers))`, a hashed set: these statements are
-- prepared, and under a generic plan `= ANY` of a parameter array is a linear search
-- of the array for every row (measured: 512 elements, 100k rows, 240 ms against 30).

-- name: beat_session_limits
-- A beat's session: a beat paused inside a transaction must not keep rows locked
-- (failure contract, "Stalled sessions hold no locks": docs/explanation/failure-contract.md).
SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s, false) AS idle_timeout,
       set_config('statement_timeout', %(statement_timeout)s, false) AS statement_timeout

-- name: beat_register
-- Register or refresh this beat (liveness for operators, fair-share arithmetic). A beat
-- (re)starts taking part: a standby of an earlier process of that name is over.
INSERT INTO dispatch_beatnode (name, hostname, pid, started_at, heartbeat_at, partitions,
                               stale_writes_rejected, fired_total, published_total)
VALUES (%(name)s, %(hostname)s, %(pid)s, clock_timestamp(), clock_timestamp(), '[]'::jsonb, 0, 0, 0)
ON CONFLICT (name) DO UPDATE
SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = EXCLUDED.started_at,
    heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL, standby_since = NULL

-- name: beat_keep
-- The lease keeper's one round trip: renew the leases still held at their epoch
-- (an expired one is not renewed: it must be re-acquired, with a new epoch), write
-- the heartbeat with its counters and whether its publishes are failing, and return the database clock, the partitions
-- renewed and the live beats (fair share: a beat standing by after a publish stall
-- takes no part, scheduler/handover.py). Autocommit: it holds no lock past itself.
WITH renewed AS (
    UPDATE dispatch_schedulerpartition p
    SET lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    FROM unnest(%(numbers)s::int[], %(epochs)s::bigint[]) AS mine(number, epoch)
    WHERE p.number = mine.number AND p.epoch = mine.epoch AND p.owner = %(name)s
      AND p.lease_expires_at > clock_timestamp()
    RETURNING p.number
), me AS (
    UPDATE dispatch_beatnode
    SET heartbeat_at = clock_timestamp(), partitions = %(partitions)s::jsonb,
        stale_writes_rejected = stale_writes_rejected + %(rejected)s,
        fired_total = fired_total + %(fired)s, published_total = published_total + %(published)s,
        publish_failing = %(failing)s
    WHERE name = %(name)s
    RETURNING name
)
SELECT clock_timestamp() AS now,
       (SELECT COALESCE(array_agg(number ORDER BY number), '{}') FROM renewed) AS renewed,
       (SELECT COALESCE(array_agg(name ORDER BY name), '{}') FROM dispatch_beatnode
         WHERE stopped_at IS NULL AND standby_since IS NULL
           AND heartbeat_at > clock_timestamp() - make_interval(secs => %(ttl)s)) AS live,
       (SELECT count(*) FROM dispatch_schedulerpartition) AS ranges

-- name: beat_probe
-- The cycle's first round trip, read-only (no fence needed): is anything of our
-- partitions due to fire (the firing statements' filters, both kinds), is a pending
-- execution in the stage-ahead window written since the beat last loaded, and,
-- when the sweep is due, has the sweep anything to do (stale_queued, auto_resume,
-- paused_upstreams_due, sweep_lock_expired's filters). Each answer is a superset of
-- what the statement it stands for would find, so skipping on "no" loses nothing;
-- the fenced transactions run only on "yes".
SELECT
    EXISTS (
        SELECT 1 FROM dispatch_schedule s
        WHERE s.partition = ANY(%(numbers)s::int[])
          AND s.next_run_at <= statement_timestamp() + make_interval(secs => %(lookahead)s)
          AND NOT s.paused AND s.deleted_at IS NULL
    ) AS due,
    EXISTS (
        SELECT 1 FROM dispatch_execution e
        WHERE e.partition = ANY(%(numbers)s::int[])
          AND e.state IN ('scheduled', 'retry_scheduled')
          AND COALESCE(e.next_attempt_at, e.due_at)
              <= statement_timestamp() + make_interval(secs => %(lookahead)s)
          -- Written (inserted or updated) by a transaction not yet finished when
          -- the beat last loaded (its horizon, beat_horizon; NULL: nothing loaded
          -- yet): a watermark, not the heap's ids — with 100k staged rows those
          -- were megabytes a cycle. age() compares transaction ids across wraparound.
          AND (%(since)s::bigint IS NULL OR age(e.xmin) <= age(%(since)s::text::xid)
               OR COALESCE(e.next_attempt_at, e.due_at) > %(until)s::timestamptz)
    ) AS unloaded,
    %(sweep)s AND (
        EXISTS (
            SELECT 1 FROM dispatch_execution x
            WHERE x.partition = ANY(%(numbers)s::int[]) AND x.state = 'queued'
              AND (x.published_at IS NULL
                   OR COALESCE(x.published_at, x.republished_at, x.enqueued_at)
                      < statement_timestamp() - make_interval(secs => %(republish_s)s))
        )
        OR EXISTS (
            SELECT 1 FROM dispatch_schedule s
            WHERE s.partition = ANY(%(numbers)s::int[]) AND s.paused
              AND s.paused_until <= statement_timestamp() AND s.deleted_at IS NULL
        )
        OR EXISTS (
            SELECT 1 FROM dispatch_schedule s
            WHERE s.id IN (
                    SELECT link.to_schedule_id FROM dispatch_schedule_depends_on link
                    JOIN dispatch_schedule d ON d.id = link.from_schedule_id
                    WHERE d.deleted_at IS NULL AND NOT d.paused)
              AND s.partition IN (SELECT unnest(%(numbers)s::int[]))
              AND s.paused AND s.deleted_at IS NULL AND s.kind = 'cron'
              AND s.next_run_at < statement_timestamp() - make_interval(secs => s.misfire_grace_s)
        )
        OR EXISTS (
            SELECT 1 FROM dispatch_execution e
            JOIN dispatch_schedule s ON s.id = e.schedule_id
            WHERE e.state = 'running' AND e.partition IN (SELECT unnest(%(numbers)s::int[]))
              AND (e.lease_expires_at < now()
                   OR e.started_at + make_interval(secs => s.timeout_s + %(grace_s)s) < now())
        )
    ) AS sweep

-- name: beat_stopped
-- Graceful shutdown: no longer counted in anyone's fair share.
UPDATE dispatch_beatnode SET stopped_at = clock_timestamp(), partitions = '[]'::jsonb WHERE name = %(name)s

-- name: partitions_ensure_lock
-- Beats starting together create the lease ranges one at a time (held to commit).
SELECT pg_advisory_xact_lock(hashtext('dispatch_schedulerpartition'))

-- name: partitions_ensure
-- Create the lease ranges when there are none: `count` rows, range n covering the
-- logical partitions [n·L/count, (n+1)·L/count). An installation's ranges are the
-- table's: a beat configured with another count uses them (dispatch/partitioning.py).
-- Returns how many ranges there are.
WITH created AS (
    INSERT INTO dispatch_schedulerpartition (number, epoch, lo, hi)
    SELECT n, 0, n * %(logical)s / %(count)s, (n + 1) * %(logical)s / %(count)s
    FROM generate_series(0, %(count)s - 1) AS n
    WHERE NOT EXISTS (SELECT 1 FROM dispatch_schedulerpartition)
    RETURNING 1
)
SELECT (SELECT count(*) FROM created) + (SELECT count(*) FROM dispatch_schedulerpartition) AS ranges

-- name: partitions_recut_lock
-- Re-cutting the ranges waits for every fenced beat transaction in flight (their FOR KEY
-- SHARE row locks) and holds every new fence, acquisition and renewal until it commits.
LOCK TABLE dispatch_schedulerpartition IN EXCLUSIVE MODE

-- name: partitions_recut
-- Cut the logical partitions into `count` ranges (run under partitions_recut_lock): every
-- lease cleared and every epoch above any granted before, so no beat's grant matches a
-- new row — each beat drops its leases at its next fence or renewal and takes new ranges;
-- rows beyond the count removed. No schedule or execution row is touched.
WITH top AS (SELECT COALESCE(max(epoch), 0) + 1 AS epoch FROM dispatch_schedulerpartition),
gone AS (DELETE FROM dispatch_schedulerpartition WHERE number >= %(count)s RETURNING number)
INSERT INTO dispatch_schedulerpartition (number, owner, lease_expires_at, epoch, lo, hi)
SELECT n, '', NULL, top.epoch, n * %(logical)s / %(count)s, (n + 1) * %(logical)s / %(count)s
FROM generate_series(0, %(count)s - 1) AS n, top
ON CONFLICT (number) DO UPDATE
SET owner = '', lease_expires_at = NULL, epoch = EXCLUDED.epoch, lo = EXCLUDED.lo, hi = EXCLUDED.hi
RETURNING number, epoch

-- name: partitions_acquire
-- Take up to `want` free or expired partition ranges; each takeover bumps the epoch (the
-- fencing token). Returns each range's bounds: the logical partitions it covers.
WITH candidates AS (
    SELECT number FROM dispatch_schedulerpartition
    WHERE (owner = '' OR lease_expires_at IS NULL OR lease_expires_at < clock_timestamp())
    ORDER BY number
    LIMIT %(want)s
    FOR UPDATE SKIP LOCKED
)
UPDATE dispatch_schedulerpartition p
SET owner = %(owner)s, lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s),
    epoch = p.epoch + 1
FROM candidates c
WHERE p.number = c.number
RETURNING p.number, p.epoch, p.lo, p.hi

-- name: partitions_release
-- Give partitions up (graceful shutdown or rebalancing) so another beat takes them at once.
UPDATE dispatch_schedulerpartition p
SET owner = '', lease_expires_at = NULL
FROM unnest(%(numbers)s::int[], %(epochs)s::bigint[]) AS mine(number, epoch)
WHERE p.number = mine.number AND p.epoch = mine.epoch AND p.owner = %(owner)s
RETURNING p.number

-- name: partitions_free
-- Which of these partitions nobody holds (free, or their lease ran out): a beat standing
-- by after a publish stall takes part again when what it handed over was not taken.
SELECT count(*) AS free FROM dispatch_schedulerpartition
WHERE number = ANY(%(numbers)s::int[])
  AND (owner = '' OR lease_expires_at IS NULL OR lease_expires_at < clock_timestamp())

-- name: beat_handover_lock
-- Hand-overs after a publish stall take turns, fleet-wide (one lock, held to commit):
-- two beats stalled at once cannot each see the other as the taker and both stand by.
SELECT pg_advisory_xact_lock(4242000002)

-- name: beat_step_out
-- A beat that could not publish stands by (scheduler/handover.py) — only when another
-- live beat takes part to take its partitions, neither standing by nor failing to
-- publish itself (its heartbeat says so): with none — the broker down for all — it
-- keeps them. Run after beat_handover_lock, in the transaction of the hand-over.
UPDATE dispatch_beatnode me
SET standby_since = clock_timestamp(), handovers_total = me.handovers_total + 1
WHERE me.name = %(name)s
  AND EXISTS (
      SELECT 1 FROM dispatch_beatnode other
      WHERE other.name <> %(name)s AND other.stopped_at IS NULL AND other.standby_since IS NULL
        AND NOT other.publish_failing
        AND other.heartbeat_at > clock_timestamp() - make_interval(secs => %(ttl)s))
RETURNING me.name

-- name: beat_rejoin
-- The standby is over: the beat counts in the fair share again.
UPDATE dispatch_beatnode SET standby_since = NULL WHERE name = %(name)s

-- name: hand_back_unpublished
-- In the fenced transaction of a hand-over after a publish stall: rows the beat admitted
-- but never got onto the broker lose their publish time, so the partition's next owner
-- publishes them at its first sweep (stale_queued) instead of QUEUED_REPUBLISH_S later.
-- Only rows still queued at the attempt admitted, in partitions the fence still holds.
UPDATE dispatch_execution e
SET published_at = NULL
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS v(id, attempt)
WHERE e.id = v.id AND e.attempt = v.attempt AND e.state = 'queued'
  AND e.partition IN (SELECT unnest(%(numbers)s::int[]))
RETURNING e.id

-- name: fence_partitions
-- The fence: key-share-lock the partitions still ours at our epoch, with an unexpired lease.
-- FOR KEY SHARE, not FOR SHARE: it conflicts with FOR UPDATE, which every takeover
-- takes (partitions_acquire's candidates: a fenced partition is skipped, so no
-- takeover can commit between the fence and the commit), but not with the
-- FOR NO KEY UPDATE lock of a plain UPDATE of non-key columns — the renewal in
-- beat_keep, run by the lease keeper on its own connection, so it never queues
-- behind a long firing transaction and lets the lease lapse meanwhile. Nothing
-- else can slip through that gap: the only other UPDATE is partitions_release,
-- which matches our own epoch, is issued by the same beat between its
-- transactions (or inside the fenced transaction of a hand-over, after its last
-- write), and leaves the row to be taken only by an acquire (FOR UPDATE).
SELECT p.number FROM dispatch_schedulerpartition p
JOIN unnest(%(numbers)s::int[], %(epochs)s::bigint[]) AS mine(number, epoch)
  ON p.number = mine.number AND p.epoch = mine.epoch
WHERE p.owner = %(owner)s AND p.lease_expires_at > clock_timestamp()
FOR KEY SHARE OF p

-- name: fire_due_one_offs
-- The set-based fast path for the common case, one-off jobs: claim, insert the one
-- execution each and advance (to nothing) in a single statement, no row leaving
-- the server. Its overlap policy (an active manual run) is decided at due time, at
-- admission, as for every execution.
-- Misfire: a one-off found more than misfire_grace_s after it fell due (run_at, or
-- its creation when run_at was already past) is recorded skipped under policy
-- `skip`, and runs as a late (catch_up) run under run_once / catch_up.
WITH due AS (
    SELECT s.id, s.tenant_id, s.partition, s.run_at, s.misfire, s.misfire_grace_s,
           EXTRACT(EPOCH FROM (statement_timestamp() - GREATEST(s.run_at, s.created_at))) AS late_s
    FROM dispatch_schedule s
    WHERE s.partition = ANY(%(numbers)s::int[])
      AND s.next_run_at <= statement_timestamp() + make_interval(secs => %(lookahead)s)
      AND NOT s.paused AND s.deleted_at IS NULL
      AND s.kind = 'once'
    -- No ORDER BY: the beat claims everything due in the window before it publishes
    -- (publishing is in due order, from its heap), and sorting every due row of
    -- eight partitions for each batch of 5,000 made a 100k burst quadratic.
    LIMIT %(batch)s
    FOR UPDATE OF s SKIP LOCKED
), inserted AS (
    INSERT INTO dispatch_execution
        (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt, state,
         fencing_token, reason_code, reason, created_at, fired_by, fired_epoch)
    SELECT dispatch_execution_id(d.run_at), d.id, d.tenant_id, d.partition, d.run_at, d.run_at,
           CASE WHEN d.late_s > d.misfire_grace_s AND d.misfire <> 'skip' THEN 'catch_up' ELSE 'api' END,
           1,
           CASE WHEN d.late_s > d.misfire_grace_s AND d.misfire = 'skip' THEN 'skipped' ELSE 'scheduled' END,
           0,
           CASE WHEN d.late_s > d.misfire_grace_s AND d.misfire = 'skip' THEN 'misfire' ELSE '' END,
           CASE WHEN d.late_s > d.misfire_grace_s AND d.misfire = 'skip'
                THEN 'skipped by misfire policy (skip): the one-off job was found '
                     || floor(d.late_s)::bigint || 's late, beyond the '
                     || d.misfire_grace_s || 's grace period'
                ELSE '' END,
           clock_timestamp(), %(fired_by)s, mine.epoch
    FROM due d
    JOIN unnest(%(numbers)s::int[], %(epochs)s::bigint[]) AS mine(number, epoch) ON mine.number = d.partition
    ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
    RETURNING id, state
), advanced AS (
    UPDATE dispatch_schedule s SET next_run_at = NULL
    FROM due d WHERE s.id = d.id
    RETURNING 1
)
-- Skipped ones are returned: their dependents are skipped too, naming them.
SELECT (SELECT count(*) FROM advanced) AS claimed, (SELECT count(*) FROM inserted) AS fired,
       (SELECT COALESCE(array_agg(id), '{}') FROM inserted WHERE state = 'skipped') AS skipped_ids

-- name: due_schedules
-- Due schedules of our partitions, claimed with SKIP LOCKED so racing beats never block or double-fire.
SELECT s.id, s.tenant_id, s.partition, s.kind, s.cron, s.timezone, s.run_at, s.next_run_at,
       s.misfire, s.misfire_grace_s, s.catch_up_limit, s.jitter_s, s.overlap, s.created_at
FROM dispatch_schedule s
WHERE s.partition = ANY(%(numbers)s::int[])
  AND s.next_run_at <= statement_timestamp() + make_interval(secs => %(lookahead)s)
  AND NOT s.paused AND s.deleted_at IS NULL
  -- one-offs are fire_due_one_offs' (the exact complement of its filter)
  AND s.kind <> 'once'
ORDER BY s.next_run_at
LIMIT %(batch)s
FOR UPDATE OF s SKIP LOCKED

-- name: active_executions
-- Executions still in flight for the given schedules (overlap policy at due time),
-- other than the candidates being decided (the caller knows those; a burst of
-- one-offs then returns nothing): with each one's occurrence and whether it is
-- itself due (a held row is, a future one is not).
SELECT e.schedule_id, e.id, e.state, e.scheduled_for,
       COALESCE(e.next_attempt_at, e.due_at) <= statement_timestamp() AS due, e.trigger
FROM dispatch_execution e
WHERE e.schedule_id = ANY(%(ids)s::uuid[])
  AND e.state = ANY(%(active)s::text[])
  AND NOT EXISTS (SELECT 1 FROM unnest(%(candidates)s::uuid[]) AS c(id) WHERE c.id = e.id)

-- name: mark_admission_skipped
-- Overlap `forbid` or a concurrency key's `skip` at due time: the occurrence is
-- recorded as skipped (reason code `code`), naming the run still active.
UPDATE dispatch_execution e
SET state = 'skipped', finished_at = clock_timestamp(), reason_code = %(code)s, reason = v.reason
FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS v(id, reason)
-- The first attempt of its chain: a new occurrence, or a re-run (attempt_base + 1).
WHERE e.id = v.id AND e.state = 'scheduled' AND e.attempt = e.attempt_base + 1
RETURNING e.id

-- name: cancel_for_replace
-- Overlap `replace` or a concurrency key's `replace`: cancel the active runs, each with
-- its reason; bumping the token makes the running worker's heartbeat and completion fail.
UPDATE dispatch_execution e
SET state = 'cancelled', fencing_token = e.fencing_token + 1, finished_at = clock_timestamp(),
    reason_code = %(code)s, reason = v.reason
FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS v(id, reason)
WHERE e.id = v.id AND e.state = ANY(%(active)s::text[])
RETURNING e.id, e.schedule_id, e.tenant_id

-- name: insert_executions
-- One row per occurrence; a racing beat's duplicate is silently dropped by the unique key.
INSERT INTO dispatch_execution
    (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt, state,
     fencing_token, reason_code, reason, created_at, fired_by, fired_epoch)
SELECT v.id, v.schedule_id, v.tenant_id, v.partition, v.scheduled_for, v.due_at, v.trigger, 1, v.state,
       0, v.reason_code, v.reason, clock_timestamp(), %(fired_by)s, v.epoch
FROM unnest(%(ids)s::uuid[], %(schedule_ids)s::uuid[], %(tenant_ids)s::bigint[], %(partitions)s::int[],
            %(scheduled_fors)s::timestamptz[], %(due_ats)s::timestamptz[], %(triggers)s::text[],
            %(states)s::text[], %(reason_codes)s::text[], %(reasons)s::text[], %(epochs)s::bigint[])
     AS v(id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, state, reason_code, reason, epoch)
ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
RETURNING id, state

-- name: advance_schedules
-- Move each fired schedule's next_run_at past what was just fired (NULL: nothing left, e.g. a one-off).
UPDATE dispatch_schedule s
SET next_run_at = v.next_run_at
FROM unnest(%(ids)s::uuid[], %(next_run_ats)s::timestamptz[]) AS v(id, next_run_at)
WHERE s.id = v.id

-- name: beat_horizon
-- The oldest transaction still running: every row written by a transaction older
-- than this is visible to a statement starting now. Taken before loading, it is the
-- watermark of what the load saw (pending_executions' and beat_probe's `since`).
-- With it, the end of the window it loads: a row written before the horizon with a
-- later due time (a rate-limit hand-back, a retry) enters the window afterwards and
-- is found by its due time instead (`until`).
SELECT mod(pg_snapshot_xmin(pg_current_snapshot())::text::bigint, 4294967296) AS horizon,
       statement_timestamp() + make_interval(secs => %(lookahead)s) AS until

-- name: pending_executions
-- Executions of our partitions due within the stage-ahead window, waiting to be
-- published (new, retries, or left behind by a crashed beat), one page in (due, id)
-- order after (after_due, after_id); with `since`, only rows written by a
-- transaction not finished at the previous load (see beat_horizon): loading stays
-- incremental when 100k rows are staged.
-- With the schedule's concurrency key (NULL for nearly every row: no cost beyond the
-- join the priority already needs).
SELECT e.id, e.attempt, COALESCE(e.next_attempt_at, e.due_at) AS due, s.priority, s.duration_class,
       e.tenant_id, e.partition, e.schedule_id, s.overlap, e.scheduled_for, e.trigger, e.state,
       e.attempt_base, s.concurrency_key->>'rendered' AS ckey,
       (s.concurrency_key->>'limit')::int AS ckey_limit,
       s.concurrency_key->>'on_conflict' AS ckey_on_conflict
FROM dispatch_execution e
JOIN dispatch_schedule s ON s.id = e.schedule_id
WHERE e.partition = ANY(%(numbers)s::int[])
  AND e.state IN ('scheduled', 'retry_scheduled')
  AND COALESCE(e.next_attempt_at, e.due_at) <= statement_timestamp() + make_interval(secs => %(lookahead)s)
  AND (%(since)s::bigint IS NULL OR age(e.xmin) <= age(%(since)s::text::xid)
       OR COALESCE(e.next_attempt_at, e.due_at) > %(until)s::timestamptz)
  AND (%(after_due)s::timestamptz IS NULL
       OR (COALESCE(e.next_attempt_at, e.due_at), e.id) > (%(after_due)s::timestamptz, %(after_id)s::uuid))
ORDER BY due, e.id
LIMIT %(limit)s

-- name: admission_lock_global
-- With DISPATCH_MAX_INFLIGHT set, admissions of every beat take turns (one lock per
-- batch, held to commit): the platform-wide count and the admission cannot interleave.
SELECT pg_advisory_xact_lock(4242000001)

-- name: admission_lock_tenants
-- Serialise admission per capped tenant on its quota row, in tenant order (no deadlock
-- between beats). Tenants without a cap are not locked: their hot path does not queue
-- behind other beats. NO KEY UPDATE: it excludes other admitters and the manual
-- trigger's FOR UPDATE, not the foreign-key checks of inserts.
SELECT q.tenant_id FROM tenants_tenantquota q
WHERE q.tenant_id = ANY(%(tenant_ids)s::bigint[]) AND q.max_concurrent > 0
ORDER BY q.tenant_id
FOR NO KEY UPDATE OF q

-- name: admission_grants_clear
-- A beat's grants (dispatch_admissiongrant) are those of the batch it is admitting:
-- what its chunks did not use is given up after the batch.
DELETE FROM dispatch_admissiongrant WHERE beat = %(beat)s

-- name: admission_grants_use
-- The slots a chunk's admitted rows now hold leave the beat's grant in the commit that
-- queues the rows: one snapshot sees either the slots or the rows (tenant_slots).
UPDATE dispatch_admissiongrant g
SET slots = g.slots - v.used
FROM unnest(%(tenant_ids)s::bigint[], %(used)s::int[]) AS v(tenant_id, used)
WHERE g.beat = %(beat)s AND g.tenant_id = v.tenant_id

-- name: admission_grants_take
-- The slots this beat takes for its batch, one row per capped tenant of it (0: none
-- free), named by one range it holds (`range_number` at `epoch`): see tenant_slots for
-- when they stop counting. Run under the tenants' quota row locks. Any other grant of
-- this beat (one a failed admission left behind) goes, and so do grants of these
-- tenants that no longer count (a dead beat's whose range was taken over).
WITH gone AS (
    DELETE FROM dispatch_admissiongrant g
    WHERE (g.beat = %(beat)s AND g.tenant_id <> ALL(%(tenant_ids)s::bigint[]))
       OR (g.tenant_id = ANY(%(tenant_ids)s::bigint[]) AND g.beat <> %(beat)s
           AND NOT EXISTS (SELECT 1 FROM dispatch_admissiongrant_live l WHERE l.id = g.id))
)
INSERT INTO dispatch_admissiongrant (beat, tenant_id, range_number, epoch, slots)
SELECT %(beat)s, v.tenant_id, %(range_number)s, %(epoch)s, v.slots
FROM unnest(%(tenant_ids)s::bigint[], %(slots)s::int[]) AS v(tenant_id, slots)
ON CONFLICT (tenant_id, beat) DO UPDATE
SET range_number = EXCLUDED.range_number, epoch = EXCLUDED.epoch, slots = EXCLUDED.slots

-- name: tenant_slots
-- (dispatch.selectors.tenant_slots) Per tenant: cap, fair-share weight, daily quota,
-- and for capped tenants what takes their slots: in-flight executions
-- (dispatch.states.IN_FLIGHT_STATES: queued + running, counted up to the cap: the
-- answer is only ever "how much room is left") and the slots other admitters than
-- `beat` hold as grants ('' for none). Run after admission_lock_tenants (or the
-- trigger's FOR UPDATE), as its own statement: its snapshot then includes every
-- admission committed by whoever held the lock before. Both in ONE statement: an
-- admission gives its grant up in the commit that queues its rows, and only one
-- snapshot sees exactly one of the two (two statements could see neither).
-- A grant counts while its range is still its beat's at the epoch it named (the view
-- dispatch_admissiongrant_live, migration 0027): a beat that died holding one stops
-- counting when its range is taken over, and the admission that uses a grant fences
-- that range, so no takeover (and no reading of it as dead) can commit while the
-- grant's slots are being filled.
SELECT t.id, t.slug, q.max_concurrent, q.weight,
       CASE WHEN q.max_concurrent > 0 THEN
           (SELECT count(*) FROM (
               SELECT 1 FROM dispatch_execution e
               WHERE e.tenant_id = t.id AND e.state = ANY(%(in_flight)s::text[])
               LIMIT q.max_concurrent) AS f)
       ELSE 0 END AS inflight,
       q.max_executions_per_day,
       CASE WHEN q.max_concurrent > 0 THEN
           (SELECT COALESCE(sum(g.slots), 0) FROM dispatch_admissiongrant_live g
            WHERE g.tenant_id = t.id AND g.beat <> %(beat)s)
       ELSE 0 END AS granted
FROM tenants_tenant t
JOIN tenants_tenantquota q ON q.tenant_id = t.id
WHERE t.id = ANY(%(tenant_ids)s::bigint[])

-- name: inflight_total
-- In-flight executions (queued + running) of every tenant (DISPATCH_MAX_INFLIGHT), under admission_lock_global.
SELECT count(*) FROM dispatch_execution WHERE state = ANY(%(in_flight)s::text[])

-- name: admit_executions
-- Admission, before publishing: the rows become queued (they take their slot) in the
-- transaction that counted the slots, and only the rows returned are published.
-- A beat that dies before publishing leaves them queued: stale_queued re-publishes
-- them after QUEUED_REPUBLISH_S, so the slot is used, never leaked.
UPDATE dispatch_execution e
SET state = 'queued', queue = v.queue,
    -- enqueued_at is the first admission (fire-lag figures); published_at the latest, of
    -- any attempt (the lost-message timeout counts from it). republished_at is left alone:
    -- a retry's publish is the normal path, only stale_queued republishes a lost message.
    enqueued_at = COALESCE(e.enqueued_at, clock_timestamp()),
    published_at = clock_timestamp(),
    reason_code = CASE WHEN e.reason_code LIKE 'held_%%' THEN '' ELSE e.reason_code END,
    reason = CASE WHEN e.reason_code LIKE 'held_%%' THEN '' ELSE e.reason END,
    -- The key it now holds (admission decided it has room; '': none); NULL: keep what it
    -- has (a retry's, which still holds the key its run was admitted with).
    concurrency_key = CASE WHEN v.ckey IS NULL THEN e.concurrency_key ELSE NULLIF(v.ckey, '') END
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(partitions)s::int[], %(queues)s::text[],
            %(ckeys)s::text[])
     AS v(id, attempt, partition, queue, ckey)
-- `e.id = ANY(ids)` finds the rows by id (an index probe per id, or one pass with a
-- hashed filter), and the membership test is on the chunk's own partitions: a join of
-- the executions with `numbers` made the planner read every row staged in the beat's
-- partitions and hash them, once per chunk (at 50,000 staged rows 77 ms of a chunk's
-- join instead of 23 ms; a burst's chunks each paid it again).
WHERE e.id = ANY(%(ids)s::uuid[]) AND e.id = v.id AND e.attempt = v.attempt
  AND e.partition = v.partition AND v.partition IN (SELECT unnest(%(numbers)s::int[]))
  AND e.state IN ('scheduled', 'retry_scheduled')
  -- The rows' occurrences (store.occurrence_span): the day partitions outside are
  -- pruned at planning instead of each probed for every id.
  AND e.scheduled_for BETWEEN %(lo)s::timestamptz AND %(hi)s::timestamptz
RETURNING e.id

-- name: mark_held
-- A held-back execution stays visible with its reason (written once per reason, not every cycle).
UPDATE dispatch_execution
SET reason_code = %(code)s, reason = %(reason)s
WHERE id = ANY(%(ids)s::uuid[]) AND state IN ('scheduled', 'retry_scheduled') AND reason_code <> %(code)s
  AND scheduled_for BETWEEN %(lo)s::timestamptz AND %(hi)s::timestamptz
RETURNING id, schedule_id, tenant_id

-- name: mark_held_each
-- As mark_held, each row with its own reason (a concurrency key names its key and holder).
UPDATE dispatch_execution e
SET reason_code = %(code)s, reason = v.reason
FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS v(id, reason)
WHERE e.id = v.id AND e.state IN ('scheduled', 'retry_scheduled') AND e.reason_code <> %(code)s
  AND e.scheduled_for BETWEEN %(lo)s::timestamptz AND %(hi)s::timestamptz
RETURNING e.id, e.schedule_id, e.tenant_id

-- name: admission_lock_keys
-- Serialise admission per (tenant, concurrency key): transaction-scoped advisory locks,
-- taken after any quota rows the admission locks, in the order given (the caller sorts them), so two
-- beats admitting one key take turns and never deadlock. unnest keeps array order.
SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%(locks)s::bigint[]) AS k

-- name: key_holders
-- The executions holding the batch's keys (dispatch.states.KEY_HOLDING_STATES, written
-- as literals so the partial index execution_key_holders serves it), read after
-- admission_lock_keys: every admission committed before the lock was granted is seen.
-- Oldest admission first: `replace` cancels from the front. The candidates (a re-run's
-- row keeps its old key) are not their own holders.
SELECT e.tenant_id, e.concurrency_key, e.id, e.state
FROM dispatch_execution e
JOIN unnest(%(tenant_ids)s::bigint[], %(keys)s::text[]) AS k(tenant_id, ckey)
  ON e.tenant_id = k.tenant_id AND e.concurrency_key = k.ckey
WHERE e.concurrency_key IS NOT NULL AND e.state IN ('queued', 'running', 'retry_scheduled')
  AND NOT EXISTS (SELECT 1 FROM unnest(%(candidates)s::uuid[]) AS c(id) WHERE c.id = e.id)
ORDER BY e.enqueued_at NULLS LAST, e.id

-- name: stale_queued
-- Queued but unclaimed for too long (the broker lost the message): take them for re-publishing.
-- No publish time at all: admitted, never published, and handed back by a beat that
-- gave its partitions up after a publish stall (hand_back_unpublished) — owed at once.
UPDATE dispatch_execution e
SET republished_at = stale.at, published_at = stale.at
FROM (
    SELECT x.id, clock_timestamp() AS at FROM dispatch_execution x
    WHERE x.partition = ANY(%(numbers)s::int[]) AND x.state = 'queued'
      AND (x.published_at IS NULL
           OR COALESCE(x.published_at, x.republished_at, x.enqueued_at)
              < statement_timestamp() - make_interval(secs => %(timeout)s))
    ORDER BY x.enqueued_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS stale
WHERE e.id = stale.id
RETURNING e.id, e.attempt, e.queue

-- name: auto_resume
-- Schedules whose pause had an end time that has passed resume by themselves.
-- The subquery hands back the pause's end (RETURNING sees only the new row) for the audit row.
UPDATE dispatch_schedule s
SET paused = false, paused_until = NULL, version = s.version + 1
FROM (
    SELECT id, paused_until FROM dispatch_schedule
    WHERE partition = ANY(%(numbers)s::int[]) AND paused AND paused_until <= statement_timestamp()
      AND deleted_at IS NULL
    FOR UPDATE
) AS ended
WHERE s.id = ended.id
RETURNING s.id, s.tenant_id, ended.paused_until

-- name: mark_quota_exhausted
-- Over the tenant's executions/day quota: the occurrence is recorded as skipped with the reason, not run.
UPDATE dispatch_execution
SET state = 'skipped', finished_at = clock_timestamp(), reason_code = 'quota_exhausted', reason = %(reason)s
WHERE id = ANY(%(ids)s::uuid[]) AND state = 'scheduled'
  AND scheduled_for BETWEEN %(lo)s::timestamptz AND %(hi)s::timestamptz
RETURNING id, schedule_id, tenant_id

-- name: paused_upstreams_due
-- Paused cron schedules of our partitions that live, unpaused dependents wait on, with
-- occurrences past their grace not yet recorded: the beat records those that resuming
-- would skip anyway, as they fall due (see firing.record_paused). Driven from the
-- dependency links, so the cost follows the dependency edges, not every paused schedule.
SELECT s.id, s.tenant_id, s.partition, s.kind, s.cron, s.timezone, s.run_at, s.next_run_at,
       s.misfire, s.misfire_grace_s, s.catch_up_limit, s.jitter_s, s.overlap, s.created_at,
       s.paused_by, s.paused_reason
FROM dispatch_schedule s
WHERE s.id IN (
        SELECT link.to_schedule_id FROM dispatch_schedule_depends_on link
        JOIN dispatch_schedule d ON d.id = link.from_schedule_id
        WHERE d.deleted_at IS NULL AND NOT d.paused)
  AND s.partition IN (SELECT unnest(%(numbers)s::int[]))
  AND s.paused AND s.deleted_at IS NULL AND s.kind = 'cron'
  AND s.next_run_at < statement_timestamp() - make_interval(secs => s.misfire_grace_s)
ORDER BY s.next_run_at
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED
