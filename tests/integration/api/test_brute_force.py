"""Brute-force limits: console and admin log-ins per username and per client
address, failed API token authentications per address (real gunicorn), and an
exact per-token rate limit under concurrency (real gunicorn)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.test import Client

from tenants import services as tenant_services
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.console_support import user
from tests.support.procs import Proc, WebServer

PW = "brute-force-pw-1"
THROTTLED = "Too many failed log-in attempts"


def attempt(path: str, username: str, password: str, addr: str = "127.0.0.1") -> tuple[int, str]:
    client = Client(REMOTE_ADDR=addr)
    res = client.post(path, {"username": username, "password": password, "next": "/"})
    logged_in = "_auth_user_id" in client.session
    return (302 if logged_in else res.status_code), res.content.decode()


@pytest.mark.django_db
def test_console_login_locks_a_username_even_for_the_right_password(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_USER = "5/15min"
    user("alice", password=PW)
    results = [attempt("/login/", "alice", f"wrong-{i}") for i in range(12)]
    assert all(status == 200 for status, _ in results)
    assert [THROTTLED in body for _, body in results] == [False] * 5 + [True] * 7
    # The right password no longer logs in, from this or any address, until the window ends.
    status, body = attempt("/login/", "alice", PW)
    assert status == 200 and THROTTLED in body and "Try again in 15 minutes" in body
    assert attempt("/login/", "ALICE", PW, addr="192.0.2.7")[0] == 200
    # Five failures and the crossing are audited (not every refused attempt).
    assert AuditEvent.objects.filter(action="auth.login_failed", object_id="alice").count() == 5
    throttled = AuditEvent.objects.get(action="auth.login_throttled")
    assert throttled.actor_kind == "anonymous" and throttled.after["surface"] == "console"
    assert throttled.actor_label == "anonymous@127.0.0.1"


@pytest.mark.django_db
def test_console_login_limits_an_address_across_usernames(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_ADDRESS = "4/15min"
    user("bob", password=PW)
    # Unknown and known usernames count alike (no hint which exist).
    for name in ("nobody-1", "nobody-2", "bob", "nobody-3"):
        assert THROTTLED not in attempt("/login/", name, "guess", addr="198.51.100.9")[1]
    status, body = attempt("/login/", "bob", PW, addr="198.51.100.9")
    assert status == 200 and THROTTLED in body
    assert THROTTLED in attempt("/login/", "nobody-4", "guess", addr="198.51.100.9")[1]
    # Another address is not affected; a success does not use up the budget.
    for _ in range(5):
        assert attempt("/login/", "bob", PW, addr="198.51.100.10")[0] == 302


@pytest.mark.django_db
def test_admin_login_shares_the_limits(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_USER = "3/15min"
    user("root", password=PW, staff=True)
    assert attempt("/admin/login/", "root", PW)[0] == 302
    for i in range(2):
        assert THROTTLED not in attempt("/login/", "root", f"wrong-{i}")[1]
    assert THROTTLED not in attempt("/admin/login/", "root", "wrong-admin")[1]
    status, body = attempt("/admin/login/", "root", PW)
    assert status == 200 and THROTTLED in body
    assert AuditEvent.objects.filter(action="auth.login_failed").count() == 3
    assert AuditEvent.objects.get(action="auth.login_throttled").after["surface"] == "admin"


# --- real gunicorn --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_bad_token_flood_gets_429_while_good_tokens_keep_working(
    start: Callable[..., Proc],
) -> None:
    tenant: Tenant = tenant_services.tenant_create(slug="billing")
    _, good = tenant_services.token_issue(tenant=tenant, name="good", role=Role.VIEWER)
    _, revoked_raw = tenant_services.token_issue(tenant=tenant, name="old", role=Role.VIEWER)
    tenant_services.token_revoke(
        tenant=tenant,
        token_id=tenant.tokens.get(name="old").pk,
        actor=None,
    )
    web = WebServer(start, API_AUTH_FAILURES_PER_ADDRESS="50/15min")
    bad_tokens = [f"sched_{i:08x}_{'x' * 40}" for i in range(390)] + [revoked_raw] * 10
    # Good requests are spread through the flood, sharing its address and threads.
    jobs = [("bad", t) for t in bad_tokens]
    for i in range(40):
        jobs.insert(i * 10, ("good", good))

    def call(job: tuple[str, str]) -> tuple[str, int, str]:
        kind, token = job
        status, headers, _ = web.request(
            "GET", "/v1/schedules", headers={"Authorization": f"Bearer {token}"}
        )
        return kind, status, headers.get("retry-after", "")

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, jobs))
    good_codes = Counter(s for k, s, _ in results if k == "good")
    bad_codes = Counter(s for k, s, _ in results if k == "bad")
    assert good_codes == {200: 40}, good_codes
    assert bad_codes == {401: 50, 429: 350}, bad_codes
    assert all(int(ra) >= 1 for k, s, ra in results if s == 429)
    assert AuditEvent.objects.filter(action="auth.token_failed").count() == 50
    assert AuditEvent.objects.filter(action="auth.token_throttled").count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_token_rate_limit_is_exact_under_concurrency(start: Callable[..., Proc]) -> None:
    tenant: Tenant = tenant_services.tenant_create(slug="billing")
    _, raw = tenant_services.token_issue(tenant=tenant, name="busy", role=Role.VIEWER)
    web = WebServer(start, API_RATE_LIMIT="20/hour", WEB_WORKERS="2", WEB_THREADS="24")
    n = 48
    barrier = threading.Barrier(n)

    def call(_: int) -> int:
        barrier.wait(timeout=30)  # all in flight together
        return web.request("GET", "/v1/schedules", headers={"Authorization": f"Bearer {raw}"})[0]

    with ThreadPoolExecutor(n) as pool:
        codes = Counter(pool.map(call, range(n)))
    assert codes == {200: 20, 429: 28}, codes
