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
