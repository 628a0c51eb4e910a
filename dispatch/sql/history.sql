-- History partitions (dispatch/history/partitions.py): one partition per UTC day of
-- dispatch_execution (by scheduled_for) and dispatch_executionevent (by at), between
-- the catch-alls `_before` and `_after` (migration 0023). The DDL takes its tables
-- and bounds as `{fields}` (core/db.py, Statements.composed): PostgreSQL binds no
-- parameter into DDL.

-- name: history_partitions
-- The partitions of a history table by name, and whether a DETACH ... CONCURRENTLY left one half-done.
SELECT c.relname AS name, i.inhdetachpending AS detach_pending
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = %(parent)s::regclass
ORDER BY c.relname

-- name: history_lock_timeout
-- Give up (and try again on the next maintenance pass) rather than queue the firing path behind a lock wait.
SET LOCAL lock_timeout = '100ms'

-- name: history_detach
-- A partition out of its table (ACCESS EXCLUSIVE on the table, in the caller's transaction).
ALTER TABLE {parent} DETACH PARTITION {name}

-- name: history_rename
-- A table renamed (a detached catch-all, before its rows move).
ALTER TABLE {name} RENAME TO {new}

-- name: history_create_range
-- A new partition of [lo, hi).
CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM ({lo}) TO ({hi})

-- name: history_create_after
-- The upper catch-all, from lo to the end of time.
CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM ({lo}) TO (MAXVALUE)

-- name: history_create_before
-- The lower catch-all, from the beginning of time up to hi.
CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM (MINVALUE) TO ({hi})

-- name: history_move_rows
-- Every row of a detached table into the partitioned table (routed to their new partitions).
INSERT INTO {parent} OVERRIDING SYSTEM VALUE SELECT * FROM {old}

-- name: history_drop
-- A detached partition, gone.
DROP TABLE {name}

-- name: history_day_unfinished
-- How many executions of one day partition are not final yet: the day waits for them.
SELECT count(*) AS unfinished FROM {name} WHERE state <> ALL(%(final)s::text[])

-- name: history_day_count
-- The rows of one day partition (what the archive must hold).
SELECT count(*) AS n FROM {name}

-- name: history_day_executions
-- One day of executions as JSON lines, tenant by tenant (the tenant index's order).
SELECT e.tenant_id, row_to_json(e)::text AS line
FROM {name} e ORDER BY e.tenant_id, e.scheduled_for DESC, e.id DESC

-- name: history_day_events
-- One day of events as JSON lines, tenant by tenant (the tenant index's order).
SELECT ev.tenant_id, row_to_json(ev)::text AS line
FROM {name} ev ORDER BY ev.tenant_id, ev.at, ev.id

-- name: history_detach_concurrently
-- A partition out of its table without blocking its readers and writers (no transaction block).
ALTER TABLE {parent} DETACH PARTITION {name} CONCURRENTLY

-- name: history_detach_finalize
-- Completes a DETACH ... CONCURRENTLY that was interrupted (the partition is left "detach pending").
ALTER TABLE {parent} DETACH PARTITION {name} FINALIZE

-- name: history_attach_before
-- The lower catch-all back in, now reaching up to the first day still kept.
ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM (MINVALUE) TO ({hi})

-- name: history_table_exists
-- Whether a table of this name exists (a catch-all detached by an interrupted pass).
SELECT to_regclass(%(name)s) IS NOT NULL AS present

-- name: history_detached_checks
-- The CHECK constraints a DETACH ... CONCURRENTLY added to a partition (its old bound), which
-- the parent does not have: re-attached with a wider bound, the partition must lose them.
SELECT c.conname FROM pg_constraint c
WHERE c.conrelid = %(name)s::regclass AND c.contype = 'c'
  AND c.conname NOT IN (SELECT p.conname FROM pg_constraint p WHERE p.conrelid = %(parent)s::regclass)

-- name: history_drop_check
-- One such constraint gone.
ALTER TABLE {name} DROP CONSTRAINT {constraint}

-- name: history_maintenance_try_lock
-- One maintenance pass at a time across the platform (dispatch/history/maintenance.py):
-- a session lock, held across the pass's own transactions and DDL, never waited for.
SELECT pg_try_advisory_lock(4246, 0) AS granted

-- name: history_maintenance_unlock
-- The pass is over.
SELECT pg_advisory_unlock(4246, 0) AS released

-- name: history_ddl_lock_timeout
-- A detach, drop or attach gives up after this long instead of queueing the firing path
-- behind its lock request (archive.py tries again, then leaves it to the next pass).
SET lock_timeout = {ms}

-- name: history_ddl_lock_timeout_reset
-- Back to the session's default.
RESET lock_timeout
