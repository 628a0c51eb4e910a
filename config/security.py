"""Content-Security-Policy for the console's HTML pages.

No inline scripts or styles anywhere in the console: htmx comes from
django-htmx's bundled static file and the console's own script from
static/console/, so `'self'` is all the policy allows. The Django admin and the
API docs page (Swagger UI) ship inline code of their own and are left to their
defaults (CSP_EXEMPT_PREFIXES).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

DEFAULT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; object-src 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy: str = getattr(settings, "CONSOLE_CSP", DEFAULT_POLICY)
        self.exempt: tuple[str, ...] = tuple(getattr(settings, "CSP_EXEMPT_PREFIXES", ()))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            "Content-Security-Policy" not in response
            and response.get("Content-Type", "").startswith("text/html")
            and not request.path.startswith(self.exempt)
        ):
            response["Content-Security-Policy"] = self.policy
        return response
