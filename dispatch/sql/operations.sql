-- Bulk operations (dispatch/services/bulk.py): the control pump's fair pick and the
-- per-tenant bound on queued items.

-- name: operation_next
-- The running operation the next chunk works, fairly across tenants: each tenant's oldest
-- first, and the tenants in turn, starting after the one served last (`after`, wrapping
-- round), so one tenant's queue of 10,000-item operations delays another tenant's small
-- one by at most a chunk per tenant ahead of it, not by the whole queue. Locked for the
-- chunk, SKIP LOCKED: an operation another pump holds is passed over (its tenant's next
-- one, or another tenant's, is taken).
SELECT o.id, o.tenant_id
FROM dispatch_operation o
JOIN (
    SELECT r.id, row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.created_at, r.id) AS turn
    FROM dispatch_operation r
    WHERE r.state = %(running)s
) t ON t.id = o.id
WHERE o.state = %(running)s
ORDER BY t.turn, o.tenant_id <= %(after)s, o.tenant_id
LIMIT 1
FOR UPDATE OF o SKIP LOCKED

-- name: operation_tenant_lock
-- Requests of one tenant that queue items take turns while they count what it has queued
-- (two must not both take the last room under the bound). An advisory lock of its own key
-- space, not the tenant's row.
SELECT pg_advisory_xact_lock(4245, hashtext(%(tenant_id)s::text))

-- name: operation_tenant_queued
-- Items of the tenant's running operations not worked yet (the bound counts these).
SELECT coalesce(sum(o.total - o.processed), 0) FROM dispatch_operation o
WHERE o.tenant_id = %(tenant_id)s AND o.state = %(running)s
