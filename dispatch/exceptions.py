"""Errors of the dispatch app; each carries a `code` and HTTP `status` the API returns."""

from __future__ import annotations


class DispatchError(Exception):
    code = "dispatch_error"
    status = 400

    def __init__(self, message: str, *, detail: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}


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
