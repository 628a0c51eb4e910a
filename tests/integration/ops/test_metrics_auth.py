"""/metrics is not public: a real gunicorn process reads METRICS_TOKEN (or
METRICS_TOKEN_FILE) and requires it; production refuses anonymous scrapes unless
METRICS_PUBLIC=1."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from tenants import services as tenant_services
from tests.support.procs import Proc, WebServer

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def production_env(**extra: str) -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": "config.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback
    }
    env.update(extra)
    return env


def test_metrics_token_file_is_required_by_a_real_server(
    start: Callable[..., Proc], tmp_path: Path
) -> None:
    tenant_services.tenant_create(slug="secret-customer")
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token + "\n")
    web = WebServer(start, METRICS_TOKEN_FILE=str(token_file))

    status, headers, body = web.request("GET", "/metrics")
    assert status == 401 and b"secret-customer" not in body
    assert headers["www-authenticate"].startswith("Bearer")
    assert web.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
    # The token given as another scheme is not a bearer token.
    assert web.request("GET", "/metrics", headers={"Authorization": f"Basic {token}"})[0] == 401
    status, _, body = web.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    assert status == 200 and b"scheduler_beats_alive" in body


def test_production_refuses_anonymous_metrics_unless_allowed(start: Callable[..., Proc]) -> None:
    tenant_services.tenant_create(slug="secret-customer")
    closed = WebServer(start, name="web-closed", **production_env())
    status, _, body = closed.request("GET", "/metrics")
    assert status == 403 and b"METRICS_TOKEN" in body and b"secret-customer" not in body

    token = secrets.token_urlsafe(24)
    guarded = WebServer(start, name="web-token", **production_env(METRICS_TOKEN=token))
    assert guarded.request("GET", "/metrics")[0] == 401
    ok = guarded.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    assert ok[0] == 200

    public = WebServer(start, name="web-public", **production_env(METRICS_PUBLIC="1"))
    status, _, body = public.request("GET", "/metrics")
    assert status == 200 and b"scheduler_beats_alive" in body
