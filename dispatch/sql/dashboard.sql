-- The dashboard's reads that no time range bounds (dispatch/selectors/executions.py): a
-- rerun brings an old occurrence back in flight, so its row may be in any day partition.
-- Planned over every partition, each would cost the planning of every day kept at every
-- request (80-100 ms at 253 days); as prepared statements (DB_PREPARED_STATEMENTS) a
-- connection plans them a few times and keeps a generic plan. The states come in as
-- literals (dispatch.states), which the generic plan needs to use the partial indexes.

-- name: tenant_inflight_count
-- (dispatch.selectors.tenant_usage) The tenant's in-flight executions, through each day's
-- partial index execution_inflight_tenant (`in_flight`: IN_FLIGHT_STATES, its states).
SELECT count(*) AS n
FROM dispatch_execution e
WHERE e.tenant_id = %(tenant_id)s AND e.state = ANY({in_flight})

-- name: tenant_running_keys
-- (dispatch.selectors.executions_running) The keys (id, scheduled_for) of the tenant's
-- `limit` running executions started last: the caller reads those rows pruned to their days.
SELECT e.id, e.scheduled_for
FROM dispatch_execution e
WHERE e.tenant_id = %(tenant_id)s AND e.state = {running}
ORDER BY e.started_at DESC, e.id DESC
LIMIT %(limit)s
