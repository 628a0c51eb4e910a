"""Request-wide middleware: request ids for audit/logs, and the API body guard."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

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


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "detail": {}}}, status=status)


class ApiBodyGuardMiddleware:
    """Oversized API bodies get 413 and NUL bytes 400, before any parsing.

    Django would turn an oversized body into a generic 400; API clients deserve
    to be told which limit they hit.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/v1/") and request.method in {"POST", "PUT", "PATCH"}:
            limit = settings.API_MAX_BODY_BYTES
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return _error(400, "bad_request", "Content-Length is not a number")
            if length > limit:
                return _error(413, "payload_too_large", f"request body exceeds {limit} bytes")
            body = request.body  # cached: DRF parses the same bytes later
            if b"\x00" in body or b"\\u0000" in body:
                return _error(400, "invalid", "request body contains a NUL byte")
        return self.get_response(request)
