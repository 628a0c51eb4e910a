"""Request-wide middleware: request ids for audit/logs, 503 while the database is
away, the API body guard, and the input guard (query parameters and form fields
must be storable text)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.html import escape

from core.api import errors, inputs

request_id_var: ContextVar[str] = ContextVar("request_id", default="")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    """Takes X-Request-Id when it is well-formed, else makes one; echoes it back."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-Id", "")
        rid = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        request.request_id = rid  # type: ignore[attr-defined]
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-Id"] = rid
        return response


class DatabaseUnavailableMiddleware:
    """A view whose database is unreachable, read-only or in recovery answers 503 with
    Retry-After (a plain page in the console, the API's error shape under /v1/), not a
    500 with Django's error page. The API's DRF views answer it in their own exception
    handler; core/db.py's `unavailable_reason` decides for both."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        reason = errors.database_unavailable(exception, request)
        return None if reason is None else errors.unavailable_response(request, reason)


def _error(
    status: int, code: str, message: str, detail: dict[str, list[str]] | None = None
) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "detail": detail or {}}}, status=status
    )


class ApiBodyGuardMiddleware:
    """Oversized API bodies get 413, before any parsing.

    Django would turn an oversized body into a generic 400; API clients deserve
    to be told which limit they hit. What the body may contain is the JSON
    parser's job (core.api.inputs.StrictJSONParser), which names the field.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/v1/") and request.method in {"POST", "PUT", "PATCH"}:
            limit = (
                settings.API_BULK_MAX_BODY_BYTES
                if request.path.endswith((":bulk", ":batch", ":apply"))
                else settings.API_MAX_BODY_BYTES
            )
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return _error(400, "bad_request", "Content-Length is not a number")
            if length > limit:
                return _error(413, "payload_too_large", f"request body exceeds {limit} bytes")
        return self.get_response(request)


class InputGuardMiddleware:
    """A query parameter or form field that is not storable text is a 400 naming it.

    PostgreSQL refuses NUL in text, so `?search=%00` used to reach the database
    and fail there as a 500. Checked once here for every view (API, console,
    operator pages) instead of in each one; JSON bodies are checked by the API's
    parser, which knows their structure.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = inputs.query_problem(request.GET)
        if problem is None and request.method == "POST" and not request.path.startswith("/v1/"):
            # Form posts of the console and admin (the API takes JSON only).
            problem = inputs.query_problem(request.POST)
        if problem is None:
            return self.get_response(request)
        field, reason = problem
        if request.path.startswith("/v1/"):
            return _error(400, "invalid", f"{field}: {reason}", {field: [reason]})
        return HttpResponseBadRequest(
            f"<!doctype html><title>Bad request</title><p>{escape(field)}: {escape(reason)}</p>"
        )
