"""Content-Security-Policy for the console's HTML pages.

No inline scripts or styles anywhere in the console: htmx comes from
django-htmx's bundled static file and the console's own script from
static/console/, so `'self'` is all the policy allows. The Django admin ships
inline code of its own and is left to its defaults (CSP_EXEMPT_PREFIXES). The API
docs page (Swagger UI from drf-spectacular-sidecar, split view: no inline script)
gets DOCS_POLICY: the same, but with the inline `<style>` of drf-spectacular's
template allowed.
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

DOCS_POLICY = DEFAULT_POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy: str = getattr(settings, "CONSOLE_CSP", DEFAULT_POLICY)
        self.exempt: tuple[str, ...] = tuple(getattr(settings, "CSP_EXEMPT_PREFIXES", ()))
        # Path prefix → its own policy (first match wins), e.g. the API docs page.
        self.by_prefix: dict[str, str] = dict(
            getattr(settings, "CSP_PREFIX_POLICIES", {"/v1/docs": DOCS_POLICY})
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            "Content-Security-Policy" not in response
            and response.get("Content-Type", "").startswith("text/html")
            and not request.path.startswith(self.exempt)
        ):
            response["Content-Security-Policy"] = next(
                (p for prefix, p in self.by_prefix.items() if request.path.startswith(prefix)),
                self.policy,
            )
        return response
