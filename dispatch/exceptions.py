"""Errors of the dispatch app; each carries a `code` and HTTP `status` the API returns."""

from __future__ import annotations

from core.errors import AppError


class DispatchError(AppError):
    code = "dispatch_error"
    status = 400


class InvalidSchedule(DispatchError):
    code = "invalid"
    status = 400

    @classmethod
    def field(cls, name: str, reason: str) -> InvalidSchedule:
        return cls(f"{name}: {reason}", detail={name: [reason]})


class NotFound(DispatchError):
    code = "not_found"
    status = 404


class VersionConflict(DispatchError):
    code = "conflict"
    status = 409


class PreconditionRequired(DispatchError):
    code = "precondition_required"
    status = 428


class IdempotencyConflict(DispatchError):
    code = "idempotency_conflict"
    status = 409


class QuotaExceeded(DispatchError):
    code = "quota_exceeded"
    status = 422


class TriggerLimited(DispatchError):
    code = "throttled"
    status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
