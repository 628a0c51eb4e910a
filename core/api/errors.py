"""One place that turns every API error into `{"error": {"code", "message", "detail"}}`."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import DisallowedHost
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

from core.errors import AppError


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
    if isinstance(exc, (OperationalError, InterfaceError)):
        # The database is down or restarting: tell the client to come back,
        # never show a traceback.
        return error_response(
            503,
            "unavailable",
            "the database is unavailable; retry shortly",
            headers={"Retry-After": "5"},
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


# --- Django-level errors under /v1/ (no DRF view ran: unknown path, bad Host) ---
# The API's contract is one error shape everywhere, so these answer JSON for
# /v1/ paths and keep Django's own pages for the console and admin.


def _json_error(status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "detail": {}}}, status=status_code
    )


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/v1/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _json_error(404, "not_found", "no such API path (paths have no trailing slash)")
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
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
    if _is_api(request):
        return _json_error(500, "server_error", "internal error; it has been logged")
    return defaults.server_error(request)
