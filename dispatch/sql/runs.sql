-- Run control: a user's cancel and re-run of one execution (dispatch/services/runs.py).
-- Both run inside the service's transaction, after it locked the row FOR UPDATE and
-- checked its state; the state condition stays in each statement all the same, so a
-- caller that skipped the lock still cannot cancel a final row or re-run an active one.

-- name: cancel_execution
-- Cancel an active execution: the token bump makes a running worker's heartbeat and
-- completion match no row (it stops at its next heartbeat and records `cancelled_stop`).
UPDATE dispatch_execution
SET state = 'cancelled', fencing_token = fencing_token + 1, finished_at = clock_timestamp(),
    lease_expires_at = NULL, next_attempt_at = NULL,
    reason_code = %(reason_code)s, reason = %(reason)s
WHERE id = %(id)s::uuid AND tenant_id = %(tenant_id)s AND state = ANY(%(active)s::text[])
RETURNING id, fencing_token

-- name: rerun_execution
-- A re-run is a new attempt chain of the same row (the occurrence keeps its one
-- execution): due now by the database clock (never before its nominal time, the
-- row's own constraint), the next attempt number with the chain's base at the old one,
-- a new token, the last chain's outcome cleared, this run's target (NULL: the
-- schedule's). Only a final row matches: of two concurrent re-runs exactly one does.
UPDATE dispatch_execution
SET state = 'scheduled', due_at = GREATEST(scheduled_for, clock_timestamp()),
    attempt = attempt + 1, attempt_base = attempt, reruns = reruns + 1,
    fencing_token = fencing_token + 1,
    queue = '', lease_owner = '', lease_expires_at = NULL, next_attempt_at = NULL,
    enqueued_at = NULL, published_at = NULL, republished_at = NULL,
    started_at = NULL, finished_at = NULL, status_code = NULL, exit_code = NULL,
    error = '', log_excerpt = '', output = NULL, reason_code = '', reason = '',
    target_override = %(target)s::jsonb,
    backfill_id = COALESCE(%(backfill_id)s::uuid, backfill_id)
WHERE id = %(id)s::uuid AND tenant_id = %(tenant_id)s AND state = ANY(%(final)s::text[])
RETURNING id, attempt, attempt_base, fencing_token, partition
