"""The one error base of the platform's domain code.

Every error a service raises on purpose is an `AppError`: it carries a stable
`code`, the HTTP `status` the API answers with, a human `message` and an
optional per-field `detail`. The API's exception handler (core/api/errors.py)
turns any of them into `{"error": {"code", "message", "detail"}}`.
"""

from __future__ import annotations


class AppError(Exception):
    """Subclasses name their code and status in the class line:
    `class NotFound(DispatchError, code="not_found", status=404)`."""

    code = "error"
    status = 400

    def __init_subclass__(
        cls, *, code: str | None = None, status: int | None = None, **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code
        if status is not None:
            cls.status = status

    def __init__(self, message: str, *, detail: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}


def constraint_name(exc: BaseException) -> str | None:
    """The name of the constraint an IntegrityError violated, from psycopg's
    diagnostics (`exc.__cause__.diag.constraint_name`), or None when the
    database did not name one."""
    cause = exc.__cause__
    diag = getattr(cause, "diag", None)
    name = getattr(diag, "constraint_name", None)
    return name if isinstance(name, str) else None
