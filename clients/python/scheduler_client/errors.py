"""Typed errors carrying the API's `{"error": {"code", "message", "detail"}}`.

One class per status the API documents, so callers write `except NotFound:`
instead of comparing numbers; anything else is a plain ApiError.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A non-2xx answer (status 0: no answer at all, a network error)."""

    status: int = 0

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        detail: Any = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
        self.retry_after = retry_after  # seconds the server asked for (429 / 503)
        self.attempts = 1  # how many times the client sent the request (its retries)
        self.note = ""  # the client's word on its retries: given up, or not sent again

    def __str__(self) -> str:
        # The message usually is the first detail already ("cron: ..."): add only the rest.
        extra = [part for part in _detail_parts(self.detail) if part not in self.message]
        text = f"{self.message} ({'; '.join(extra)})" if extra else self.message
        return f"{text} — {self.note}" if self.note else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class ValidationError(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class QuotaExceeded(ApiError):
    status = 422


class PreconditionRequired(ApiError):
    status = 428


class Throttled(ApiError):
    status = 429


class Unavailable(ApiError):
    status = 503


class TransportError(ApiError):
    """No HTTP answer: connection refused, reset, timed out (status 0)."""

    status = 0


BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (
        ValidationError,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        QuotaExceeded,
        PreconditionRequired,
        Throttled,
        Unavailable,
    )
}


def _detail_parts(detail: Any) -> list[str]:
    # {"field": ["reason", ...]} → ["field: reason", ...] — what a terminal wants.
    if detail in (None, "", {}, []):
        return []
    if isinstance(detail, dict):
        return [
            f"{key}: {'; '.join(map(str, value)) if isinstance(value, list) else value}"
            for key, value in detail.items()
        ]
    if isinstance(detail, list):
        return [str(item) for item in detail]
    return [str(detail)]


def from_response(status: int, body: Any, *, retry_after: float | None = None) -> ApiError:
    """The typed error for a response's status and parsed JSON body (any shape)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or f"http_{status}")
        message = str(error.get("message") or f"HTTP {status}")
        detail = error.get("detail")
    else:  # not the API's envelope (a proxy's page): keep what there is
        code, message, detail = f"http_{status}", f"HTTP {status}", body or None
    cls = BY_STATUS.get(status, ApiError)
    return cls(status, code, message, detail, retry_after=retry_after)
