"""Structured JSON logs: every line carries execution_id, schedule_id, tenant and
trace id when they are known (set with `log_context`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_context: ContextVar[dict[str, str]] = ContextVar("log_context", default={})  # noqa: B039 - never mutated


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    token = _context.set(
        {**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}}
    )
    try:
        yield
    finally:
        _context.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        from config.telemetry import current_trace_id

        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_context.get(),
        }
        trace_id = current_trace_id()
        if trace_id:
            line["trace_id"] = trace_id
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class ClientErrorsAtInfo(logging.Filter):
    """Django logs every 4xx answer as a warning (django.request, and runserver's
    django.server): a client's mistake — a 404, a form with a bad field — is not the
    platform's, so it is logged at INFO, and only where INFO is shown. 5xx stay errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.levelno != logging.WARNING or not isinstance(status, int):
            return True
        if not 400 <= status < 500:
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
