"""Console security: CSRF on every POST (htmx included), no state change through
GET, inert rendering of hostile names / logs / responses, CSP and htmx hardening."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants.models import ServiceToken
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror=alert(1)><div hx-get="/evil" hx-trigger="load">x</div><script>alert(2)</script>'


def _csrf(client: Any, url: str) -> str:
    page = client.get(url).content.decode()
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match, "page has no CSRF token"
    return match.group(1)


def test_every_console_post_needs_the_csrf_token(world: World) -> None:
    client = world.client("admin", csrf=True)
    sid = world.schedule.id
    token = ServiceToken.objects.create(
        tenant=world.tenant, name="t", role="viewer", prefix="sched_zzzzzzzz", digest="0" * 64
    )
    posts: list[tuple[str, dict[str, Any]]] = [
        ("/schedules/new", form_data(name="csrf-test")),
        ("/schedules/preview", form_data()),
        (f"/schedules/{sid}/edit", form_data(name="nightly")),
        (f"/schedules/{sid}/preview", form_data()),
        (f"/schedules/{sid}/pause", {"reason": "x"}),
        (f"/schedules/{sid}/resume", {}),
        (f"/schedules/{sid}/trigger", {}),
        (f"/schedules/{sid}/delete", {}),
        ("/tokens/", {"name": "x", "role": "viewer"}),
        (f"/tokens/{token.pk}/revoke", {}),
        ("/members/", {"username": "olga", "role": "admin"}),
        (f"/members/{world.viewer.pk}/role", {"role": "admin"}),
        (f"/members/{world.viewer.pk}/remove", {}),
        ("/tenant", {"tenant": "billing"}),
        ("/prefs/tz", {"tz": "Asia/Tokyo"}),
        ("/logout/", {}),
    ]
    for url, data in posts:
        response = client.post(url, data)
        assert response.status_code == 403, (url, response.status_code)
        assert b"CSRF" in response.content, url
    world.schedule.refresh_from_db()
    assert not world.schedule.paused and world.schedule.deleted_at is None
    assert Execution.objects.filter(schedule=world.schedule).count() == 1
    token.refresh_from_db()
    assert token.revoked_at is None


def test_htmx_posts_pass_with_the_header_from_the_body(world: World) -> None:
    client = world.client("operator", csrf=True)
    page = client.get("/").content.decode()
    match = re.search(r"""<body hx-headers='\{"X-CSRFToken": "([^"]+)"\}'[ >]""", page)
    assert match, "body carries the CSRF token for htmx"
    headers = {"HTTP_X_CSRFTOKEN": match.group(1), "HTTP_HX_REQUEST": "true"}
    response = client.post("/schedules/preview", form_data(), **headers)
    assert response.status_code == 200 and b"At 09:00 AM, Monday through Friday" in response.content
    response = client.post(f"/schedules/{world.schedule.id}/trigger", {}, **headers)
    assert response.status_code == 302
    # The same htmx request without the header is refused.
    assert client.post("/schedules/preview", form_data(), HTTP_HX_REQUEST="true").status_code == 403


def test_forms_with_a_token_from_the_page_succeed(world: World) -> None:
    client = world.client("operator", csrf=True)
    token = _csrf(client, f"/schedules/{world.schedule.id}/")
    response = client.post(
        f"/schedules/{world.schedule.id}/pause", {"reason": "freeze", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    world.schedule.refresh_from_db()
    assert world.schedule.paused


def test_hostile_names_logs_and_events_render_inert(world: World) -> None:
    client = world.client("admin")
    response = client.post("/schedules/new", form_data(name=HOSTILE))
    assert response.status_code == 302, response.content[:2000]
    hostile = Schedule.objects.get(name=HOSTILE)
    run = Execution.objects.filter(schedule=world.schedule).first()
    assert run is not None
    Execution.objects.filter(pk=run.pk).update(
        log_excerpt=HOSTILE, error=HOSTILE, reason=HOSTILE, state="dead"
    )
    ExecutionEvent.objects.create(
        tenant=world.tenant,
        schedule=world.schedule,
        execution=run,
        kind="attempt_failed",
        message=HOSTILE,
        actor=HOSTILE,
    )
    pages = [
        "/",
        "/schedules/",
        f"/schedules/{hostile.id}/",
        f"/schedules/{hostile.id}/edit",
        f"/schedules/{hostile.id}/delete",
        f"/schedules/{world.schedule.id}/",
        f"/executions/{run.pk}/",
        f"/explain?schedule={hostile.id}&at=2026-01-05T09:00",
    ]
    for url in pages:
        html = client.get(url).content.decode()
        for raw in (
            "<img src=x",
            '<div hx-get="/evil"',
            "<script>alert(2)</script>",
            'hx-get="/evil"',
        ):
            assert raw not in html, (url, raw)
        assert "&lt;img src=x onerror=alert(1)&gt;" in html or url == "/", url
    staff = world.client("staff")
    for url in ("/ops/", "/ops/audit"):
        html = staff.get(url).content.decode()
        assert '<div hx-get="/evil"' not in html and "<img src=x" not in html
    # Logs and responses sit in hx-disable containers as a second line of defence.
    html = client.get(f"/executions/{run.pk}/").content.decode()
    assert re.search(r'<pre class="log"[^>]* hx-disable>&lt;img', html)


def test_hostile_input_in_the_live_preview_is_escaped(world: World) -> None:
    client = world.client("operator")
    response = client.post("/schedules/preview", form_data(cron=HOSTILE))
    html = response.content.decode()
    assert response.status_code == 200
    assert "<img src=x" not in html and 'hx-get="/evil"' not in html
    assert "cron:" in html


def test_csp_and_htmx_hardening_on_console_pages(world: World) -> None:
    response = world.client("viewer").get("/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    html = response.content.decode()
    assert '"selfRequestsOnly": true' in html and '"allowEval": false' in html
    assert '"historyCacheSize": 0' in html
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert scripts, "htmx is loaded"
    for attrs, body in scripts:
        assert 'src="/static/' in attrs and not body.strip(), (
            "no inline scripts, only our static files"
        )
    assert 'src="/static/django_htmx/htmx-2.min.js"' in html
    assert "style=" not in html, "no inline styles (CSP style-src 'self')"
    login = world.client("viewer").get("/login/")
    assert "Content-Security-Policy" in login


def test_no_http_urls_outside_the_site_are_referenced(world: World) -> None:
    html = world.client("admin").get("/").content.decode()
    assert "https://" not in html.replace("https://billing.internal", "")
    assert "cdn" not in html.lower()


def test_token_page_is_not_cached_and_the_secret_is_shown_once(world: World) -> None:
    client = world.client("admin")
    created = client.post("/tokens/", {"name": "deploy-bot", "role": "operator"})
    assert created.status_code == 302, "POST-redirect-GET: a reload cannot make a second token"
    kept = client.session["console_new_token"]
    pad = created.cookies["console_new_token_pad"]
    assert pad["httponly"] and pad["path"] == "/tokens/" and pad["samesite"] == "Strict"
    response = client.get("/tokens/")
    assert response["Cache-Control"] == "no-store"
    secret = re.search(r'<code id="token-secret">([^<]+)</code>', response.content.decode())
    assert secret and secret.group(1).startswith("sched_")
    # Never in clear on the server: the session row holds it XOR the cookie's pad,
    # and drops it once shown.
    assert secret.group(1) not in str(kept) and kept["masked"]
    assert "console_new_token" not in client.session
    again = client.get("/tokens/").content.decode()
    assert secret.group(1) not in again and "deploy-bot" in again
    token = ServiceToken.objects.get(name="deploy-bot")
    assert token.digest not in again


def test_open_redirects_are_refused(world: World) -> None:
    response = world.client("viewer").post(
        "/prefs/tz", {"tz": "Asia/Tokyo", "next": "https://evil.example/"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
