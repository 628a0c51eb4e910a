"""Python client for the scheduling platform's REST API (and the `schedctl` CLI)."""

from scheduler_client.client import Client
from scheduler_client.completion import Completion
from scheduler_client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    NotFound,
    PreconditionRequired,
    QuotaExceeded,
    Throttled,
    TransportError,
    Unauthorized,
    Unavailable,
    ValidationError,
)

__all__ = [
    "ApiError",
    "Client",
    "Completion",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PreconditionRequired",
    "QuotaExceeded",
    "Throttled",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
]
