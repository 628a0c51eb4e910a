"""Errors of the dispatch app; each carries a `code` and HTTP `status` the API returns."""

from __future__ import annotations

from core.errors import AppError


class DispatchError(AppError, code="dispatch_error", status=400):
    """Any error of the dispatch app."""


class InvalidSchedule(DispatchError, code="invalid", status=400):
    """A definition or a parameter that does not validate; `detail` names the field."""

    @classmethod
    def field(cls, name: str, reason: str) -> InvalidSchedule:
        return cls(f"{name}: {reason}", detail={name: [reason]})


class NotFound(DispatchError, code="not_found", status=404):
    """No such schedule or execution for this tenant (another tenant's is missing too)."""


class ArchiveUnavailable(DispatchError, code="archive_unavailable", status=503):
    """The execution's day was archived and the archive could not be read just now."""


class VersionConflict(DispatchError, code="conflict", status=409):
    """The definition changed since the version the edit was made on."""


class StateConflict(DispatchError, code="state_conflict", status=409):
    """The object's current state does not allow the action (the message names the state)."""


class LiveLogUnavailable(DispatchError, code="unavailable", status=503):
    """The live logs' Redis did not answer: the runs go on, their live view waits."""


class CompletionDenied(DispatchError, code="not_authenticated", status=401):
    """A completion callback without a valid capability for the execution it names."""


class PreconditionRequired(DispatchError, code="precondition_required", status=428):
    """An edit that does not say which version it was made on."""


class IdempotencyConflict(DispatchError, code="idempotency_conflict", status=409):
    """An idempotency key reused with a different request body."""


class QuotaExceeded(DispatchError, code="quota_exceeded", status=422):
    """The tenant is at its limit of active schedules."""


class TriggerLimited(DispatchError, code="throttled", status=429):
    """A manual trigger refused at the tenant's concurrency limit; retry after `retry_after` s."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RunningLimit(DispatchError, code="limit_reached", status=409):
    """The tenant already runs as many backfills as BACKFILL_MAX_RUNNING_PER_TENANT allows;
    a 409, not a 429: it frees only when one of them finishes or is cancelled."""


class QueueFull(DispatchError, code="queue_full", status=429):
    """Queuing the request's items would take the tenant's running bulk operations past
    BULK_MAX_QUEUED_ITEMS_PER_TENANT; it frees as the control pump works them."""


def under(prefix: str, exc: AppError) -> AppError:
    """`exc` (same class) with its fields under `prefix`: `schedules[3].cron`, the item
    of a list request (apply's schedules and calendars) the error belongs to."""
    detail = exc.detail or {"non_field_errors": [exc.message]}
    paths = {prefix if k == "non_field_errors" else f"{prefix}.{k}": v for k, v in detail.items()}
    first, reasons = next(iter(paths.items()))
    return type(exc)(f"{first}: {reasons[0]}", detail=paths)
