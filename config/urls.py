from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from dispatch.api import identity
from dispatch.ops import health, metrics
from tenants.login import AdminLoginForm

# The admin's log-in has the console's brute-force limits (tenants/login.py).
admin.site.login_form = AdminLoginForm

api_v1: list[URLPattern | URLResolver] = [
    path(
        "openapi.json",
        SpectacularJSONAPIView.as_view(permission_classes=[AllowAny], authentication_classes=[]),
        name="openapi",
    ),
    path(
        "docs",
        # The split view serves its init script from /v1/docs?script= instead of
        # inline, so the page runs under a Content-Security-Policy without
        # 'unsafe-inline' scripts (config/security.py).
        SpectacularSwaggerSplitView.as_view(
            url_name="openapi", permission_classes=[AllowAny], authentication_classes=[]
        ),
        name="api-docs",
    ),
    path("", include("dispatch.api.urls")),
    path("", include("tenants.api.urls")),
]


def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved per request: the static file's hashed name exists once collected.
    return redirect(static("console/favicon.svg"), permanent=True)


urlpatterns = [
    path("v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path(
        ".well-known/openid-configuration",
        identity.openid_configuration,
        name="openid-configuration",
    ),
    path(".well-known/jwks.json", identity.jwks, name="jwks"),
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (the API's
    # JSON, the admin): the console's icon, not a 404 in the log.
    path("favicon.ico", favicon, name="favicon"),
    path("", include("console.urls")),
]

# /v1/ answers its documented JSON error shape even when no API view ran.
handler400 = "core.api.errors.bad_request"
handler403 = "core.api.errors.permission_denied"
handler404 = "core.api.errors.not_found"
handler500 = "core.api.errors.server_error"
