-- name: identity_key_lock
-- Writers of the workload-identity key ring take turns (two processes finding no key
-- must not both create a first one; two rotations must not both add the next one).
-- An advisory lock of its own key space: there is no row to lock before the first key.
SELECT pg_advisory_xact_lock(4245, 0)
