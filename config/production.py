"""Production settings: everything of config.settings, hardened.

DJANGO_SETTINGS_MODULE=config.production; `manage.py check --deploy` is clean.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.env import get, get_bool, get_int, get_list
from config.settings import *  # noqa: F403

DEBUG = False
if not get("SECRET_KEY"):
    raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set in production")

if COMMAND_SANDBOX != "bwrap":  # noqa: F405
    raise ImproperlyConfigured(
        "COMMAND_SANDBOX=none (unsandboxed managed commands) is for development only"
    )

SECURE_SSL_REDIRECT = get_bool("SECURE_SSL_REDIRECT", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = get_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# Tenant slugs and counts are not public: without METRICS_TOKEN, /metrics answers
# 403 unless the operator says otherwise (METRICS_PUBLIC=1, e.g. behind a private scrape network).
METRICS_PUBLIC = get_bool("METRICS_PUBLIC", False)
# "testserver" is the Django test client's host name: no real client uses it.
ALLOWED_HOSTS = [
    h for h in get_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"]) if h != "testserver"
]
# The loopback escape hatch of the SSRF guard is for development and tests only:
# a production process ignores TARGET_TEST_ALLOW whatever its environment says.
TARGET_TEST_ALLOW = []
DEMO_RECEIVER_URL = ""

# Static files: `manage.py collectstatic` (compose/Dockerfile runs it at build
# time) writes hashed, pre-compressed copies to STATIC_ROOT; WhiteNoise serves
# them from there under gunicorn with far-future cache headers.
STATIC_ROOT = get("STATIC_ROOT") or str(DATA_DIR / "staticfiles")  # noqa: F405
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = False
