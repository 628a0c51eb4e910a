"""One place that turns every API error into `{"error": {"code", "message", "detail"}}`,
and every database outage, API or console, into a 503 with Retry-After."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

from core.db import Unavailable, forget_connection, unavailable_reason
from core.errors import AppError

log = logging.getLogger(__name__)


def flatten_errors(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {str(k): flatten_errors(v) for k, v in detail.items()}
    if isinstance(detail, list):
        flat: list[Any] = []
        for item in detail:
            value = flatten_errors(item)
            flat.append(value)
        return flat
    return str(detail)


def first_message(detail: Any, path: str = "") -> str:
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        sub = f"{path}.{key}" if path and key != "non_field_errors" else (path or str(key))
        if key == "non_field_errors":
            sub = path
        return first_message(value, sub)
    if isinstance(detail, list) and detail:
        return first_message(detail[0], path)
    return f"{path}: {detail}" if path else str(detail)


def error_response(
    status_code: int,
    code: str,
    message: str,
    detail: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = {"error": {"code": code, "message": message, "detail": detail or {}}}
    return Response(body, status=status_code, headers=headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, AppError):
        retry_after = getattr(exc, "retry_after", None)
        retry_headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return error_response(exc.status, exc.code, exc.message, exc.detail, retry_headers)
    if isinstance(exc, Http404):
        return error_response(404, "not_found", "not found")
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    reason = database_unavailable(exc, context.get("request"))
    if reason is not None:
        return error_response(
            503, "unavailable", unavailable_message(reason), headers=unavailable_headers()
        )
    if isinstance(exc, DatabaseError):
        return None
    if not isinstance(exc, exceptions.APIException):
        return None
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    wait = getattr(exc, "wait", None)
    if isinstance(exc, exceptions.Throttled) and wait is not None:
        headers["Retry-After"] = str(max(1, int(wait + 0.999)))
    if isinstance(exc, exceptions.ValidationError):
        detail = flatten_errors(exc.detail)
        if isinstance(detail, list):
            detail = {"non_field_errors": detail}
        return error_response(
            status.HTTP_400_BAD_REQUEST, "invalid", first_message(detail), detail, headers
        )
    codes = {
        exceptions.NotAuthenticated: "not_authenticated",
        exceptions.AuthenticationFailed: "not_authenticated",
        exceptions.PermissionDenied: "forbidden",
        exceptions.NotFound: "not_found",
        exceptions.MethodNotAllowed: "method_not_allowed",
        exceptions.UnsupportedMediaType: "unsupported_media_type",
        exceptions.ParseError: "malformed",
        exceptions.Throttled: "throttled",
        exceptions.NotAcceptable: "not_acceptable",
    }
    err_code = next((c for t, c in codes.items() if isinstance(exc, t)), "error")
    message = str(exc.detail) if not isinstance(exc.detail, (dict, list)) else "request failed"
    return error_response(exc.status_code, err_code, message, None, headers)


# --- The database cannot serve the request: 503 + Retry-After, never a 500 ---
# A fail-over or switchover of PostgreSQL, a restart, a network cut: the request
# may be sent again in a moment (docs/explanation/failure-contract.md, "The web
# while the database is away"). The API's views answer through exception_handler,
# the other views through config.middleware.DatabaseUnavailableMiddleware, and an
# error raised by a middleware itself through the handlers below: a session that
# SessionMiddleware could not save after the view (every console page records the
# tenant in it) is its SessionInterrupted, a 400 (bad_request); a new session it
# could not create, the database's own error (server_error).


def database_unavailable(exc: BaseException, request: Any = None) -> Unavailable | None:
    """Why `exc` means the database cannot serve the request (None: it does not).

    When the session itself is of no more use (unreachable, read-only, in recovery)
    the connection is dropped, so that this thread's next request opens a new one,
    to the new primary after a fail-over.
    """
    reason = unavailable_reason(exc)
    if reason is None:
        return None
    if reason.reconnect:
        forget_connection()
    # One line, no traceback: an outage makes many of these, each saying the same.
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    log.warning(
        "database unavailable (%s): %s %s answered 503: %s",
        reason.value,
        getattr(request, "method", "-"),
        getattr(request, "path", "-"),
        first_line,
    )
    return reason


def outage_behind(exc: BaseException | None, request: HttpRequest) -> Unavailable | None:
    """`database_unavailable` for the first database error in `exc`'s chain (a middleware
    may have raised its own error from it: SessionInterrupted from UpdateError from it)."""
    while exc is not None:
        if isinstance(exc, DatabaseError):
            return database_unavailable(exc, request)
        exc = exc.__cause__ or exc.__context__
    return None


def unavailable_message(reason: Unavailable) -> str:
    return f"{reason.sentence}; retry after {settings.DB_UNAVAILABLE_RETRY_AFTER_S} s"


def unavailable_headers() -> dict[str, str]:
    return {"Retry-After": str(settings.DB_UNAVAILABLE_RETRY_AFTER_S)}


def unavailable_response(request: HttpRequest, reason: Unavailable) -> HttpResponse:
    """The 503 outside a DRF view: the API's error shape under /v1/, else a plain page."""
    response: HttpResponse
    if _is_api(request):
        response = _json_error(503, "unavailable", unavailable_message(reason))
    else:
        # Rendered without the request: the console's context processors read the
        # user and the session, from the database that is not there.
        page = render_to_string(
            "503.html",
            {"sentence": reason.sentence, "retry_after": settings.DB_UNAVAILABLE_RETRY_AFTER_S},
        )
        response = HttpResponse(page, status=503)
    for name, value in unavailable_headers().items():
        response[name] = value
    return response


# --- Django-level errors under /v1/ (no DRF view ran: unknown path, bad Host) ---
# The API's contract is one error shape everywhere, so these answer JSON for
# /v1/ paths and keep Django's own pages for the console and admin.


def _json_error(status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "detail": {}}}, status=status_code
    )


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/v1/")


def _no_such_path(path: str) -> str:
    """What is wrong with an API path that names nothing, as far as can be told."""
    shown = path if len(path) <= 200 else path[:200] + "…"
    if path.startswith("/v1/v1/"):
        return f"no such API path: {shown} (the base URL already ends in /v1; give the server's address)"
    if path.endswith("/") and path != "/v1/":
        return f"no such API path: {shown} (API paths have no trailing slash)"
    return f"no such API path: {shown}"


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _json_error(404, "not_found", _no_such_path(request.path))
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = outage_behind(exception, request)
    if reason is not None:
        return unavailable_response(request, reason)
    if _is_api(request):
        # Typically a Host header outside ALLOWED_HOSTS (DisallowedHost).
        message = "bad request"
        if isinstance(exception, DisallowedHost):
            message = "the Host header names a host this server does not serve"
        return _json_error(400, "bad_request", message)
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _json_error(403, "forbidden", "forbidden")
    return defaults.permission_denied(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls handler500 inside its `except` clause, so the error is at hand.
    reason = outage_behind(sys.exc_info()[1], request)
    if reason is not None:
        return unavailable_response(request, reason)
    if _is_api(request):
        return _json_error(500, "server_error", "internal error; it has been logged")
    return defaults.server_error(request)
