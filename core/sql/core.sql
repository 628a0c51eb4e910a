-- Statements shared by every app: the database clock and the beat wake-up.

-- name: db_now
-- The transaction's clock: due-ness never depends on an app host's clock
-- (failure contract C5: docs/explanation/failure-contract.md).
SELECT now() AS now

-- name: db_clock
-- The wall clock of the database at this moment (moves inside a transaction).
SELECT clock_timestamp() AS now

-- name: notify
-- NOTIFY a channel; PostgreSQL delivers it only when the transaction commits.
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: listen
-- Subscribe a dedicated autocommit connection to a channel (run with Statements.run_on; the channel is an identifier, which LISTEN cannot take as a parameter).
LISTEN {channel}

-- name: ping
-- Liveness probe of the database connection.
SELECT 1 AS ok

-- name: database_state
-- Whether this session's server takes writes: a standby (in recovery) or a server set read-only does not (/readyz).
SELECT pg_is_in_recovery() AS in_recovery, current_setting('transaction_read_only') = 'on' AS read_only

-- name: replica_lag
-- How far behind its primary this server's data is, in seconds (core/replicas.py): 0 when
-- it is not a standby (a promoted replica is a primary) or has replayed everything it
-- received while streaming; else the age of the last transaction it replayed (a paused
-- replay, a lost stream), Infinity when it has replayed none.
SELECT pg_is_in_recovery() AS standby,
       CASE
         WHEN NOT pg_is_in_recovery() THEN 0.0
         WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
              AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming') THEN 0.0
         ELSE COALESCE(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8,
                       'Infinity'::float8)
       END::float8 AS lag_s

-- name: prepared_statement_texts
-- The texts of this session's prepared statements named %(names)s (core/pgtrace.py names the statements a trace saw run).
SELECT name, statement FROM pg_prepared_statements WHERE name = ANY(%(names)s::text[])

-- name: plans_generic
-- (core.db.generic_plans) Prepared statements run their generic plan, to the end of
-- the transaction.
SET LOCAL plan_cache_mode = force_generic_plan

-- name: plans_default
-- (core.db.generic_plans) Back to PostgreSQL's own choice of plan (the session's
-- setting), to the end of the transaction.
SET LOCAL plan_cache_mode TO DEFAULT
