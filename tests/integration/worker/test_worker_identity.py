"""Workload identity (dispatch/identity): each run's token, verified the way a target
would verify it — PyJWT's JWKS client against the live discovery document and key
set of a real web server — for HTTP, queue and command targets run by a real worker,
and the key ring's rotation with overlap."""

from __future__ import annotations

import base64
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from django.db import connection

from core.db import db_now
from dispatch.identity import tokens
from dispatch.identity.keys import KeyUnavailable
from dispatch.models import IdentityKey, ManagedCommand
from dispatch.selectors.identity import MAX_TOKEN_LIFETIME_S, SIGNER_CACHE_S, published_keys
from dispatch.services.identity import key_ensure, key_rotate
from dispatch.targets.runtime import RunContext
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, WebServer, manage
from tests.support.procs import test_database_url as database_url
from tests.support.worker_support import run_queue_target, run_to_end

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


@pytest.fixture(scope="module")
def worker_settings(module_ledger: Ledger, platform_url: str) -> dict[str, Any]:
    return {
        "concurrency": 2,
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
        "PLATFORM_URL": platform_url,
    }


_KEPT_KEYS: list[IdentityKey] = []


@pytest.fixture(autouse=True)
def key_ring_kept(settings: Any, platform_url: str, transactional_db: Any) -> Iterator[None]:
    """The key ring outlives each test, as it does in a deployment: the module's worker
    keeps signing with the key it looked up, while the database is emptied after every
    test. This process mints as the platform at `platform_url` and looks its key up
    afresh in each test."""
    settings.PLATFORM_URL = platform_url
    IdentityKey.objects.bulk_create(_KEPT_KEYS, ignore_conflicts=True)
    tokens.forget_signer()
    yield
    tokens.forget_signer()
    _KEPT_KEYS[:] = list(IdentityKey.objects.all())


class Verifier:
    """What a target does with a token: the discovery document, then the key set it
    names, through PyJWT's own JWKS client (which fetches the set again on an unknown kid)."""

    def __init__(self, web: WebServer) -> None:
        self.config = httpx.get(f"{web.url}/.well-known/openid-configuration").json()
        self.keys = jwt.PyJWKClient(self.config["jwks_uri"], cache_keys=False)

    def verify(self, token: str, audience: str) -> dict[str, Any]:
        key = self.keys.get_signing_key_from_jwt(token)
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=self.config["id_token_signing_alg_values_supported"],
            audience=audience,
            issuer=self.config["issuer"],
            options={"require": ["exp", "iat", "nbf", "iss", "aud", "sub"]},
        )
        return claims


def context(*, timeout_s: float = 60, audience: str = "https://billing.example") -> RunContext:
    return RunContext(
        execution_id="0193a8f0-0000-7000-8000-000000000001",
        scheduled_for=datetime(2026, 12, 6, 9, 0, tzinfo=UTC),
        attempt=2,
        fencing_token=7,
        tenant_id=1,
        tenant_slug="billing",
        signing_key="k",
        egress_allow=[],
        target={"type": "http", "auth": {"type": "oidc", "audience": audience}},
        timeout_s=timeout_s,
        excerpt_bytes=4096,
        resolve_secret=lambda ref: "",
        run=1,
        schedule_id="5b3f5d2c-1111-4222-8333-444455556666",
        mint_identity=tokens.mint,
    )


def bearer(headers: dict[str, Any], name: str = "authorization") -> str:
    value = {k.lower(): v for k, v in headers.items()}[name]
    assert value.startswith("Bearer ")
    return str(value[len("Bearer ") :])


# --- the documents --------------------------------------------------------------------


def test_discovery_document_and_key_set_are_public_and_cacheable(
    web: WebServer, platform_url: str
) -> None:
    key = key_ensure()
    found = httpx.get(f"{web.url}/.well-known/openid-configuration")
    assert found.status_code == 200 and "max-age=" in found.headers["cache-control"]
    config = found.json()
    assert config["issuer"] == platform_url
    assert config["jwks_uri"] == f"{platform_url}/.well-known/jwks.json"
    assert config["id_token_signing_alg_values_supported"] == ["ES256"]
    assert {"execution_id", "attempt", "fencing_token", "scheduled_for"} <= set(
        config["claims_supported"]
    )
    keys = httpx.get(config["jwks_uri"]).json()["keys"]
    # Exactly the ring's published keys (this module keeps the ring from test to test,
    # as a deployment does: a key an earlier test rotated out may still be published),
    # the signing key among them.
    assert keys == [k.public_jwk for k in published_keys(db_now())]
    assert key.public_jwk in keys
    # The public half only: no private member of an EC JWK.
    assert all("d" not in k and k["alg"] == "ES256" for k in keys)
    assert httpx.post(config["jwks_uri"]).status_code == 405


# --- tokens: valid, expired, wrong audience, tampered -------------------------------------


def test_a_token_verifies_with_a_standard_library_and_names_its_attempt(
    web: WebServer, platform_url: str
) -> None:
    ctx = context(timeout_s=90)
    claims = Verifier(web).verify(ctx.identity_token() or "", "https://billing.example")
    assert claims["iss"] == platform_url
    assert claims["sub"] == "tenant:billing:schedule:5b3f5d2c-1111-4222-8333-444455556666"
    assert claims["exp"] - claims["iat"] == 90 and claims["nbf"] == claims["iat"]
    assert (claims["execution_id"], claims["attempt"], claims["run"], claims["fencing_token"]) == (
        ctx.execution_id,
        2,
        1,
        7,
    )
    assert claims["scheduled_for"] == "2026-12-06T09:00:00Z"
    assert claims["jti"] == f"{ctx.execution_id}:2:7"


def test_a_token_lives_at_most_an_hour_whatever_the_timeout(web: WebServer) -> None:
    claims = Verifier(web).verify(
        context(timeout_s=6 * 3600).identity_token() or "", "https://billing.example"
    )
    assert claims["exp"] - claims["iat"] == MAX_TOKEN_LIFETIME_S


def test_expired_wrong_audience_and_tampered_tokens_are_refused(web: WebServer) -> None:
    verifier = Verifier(web)
    short = context(timeout_s=1).identity_token() or ""
    good = context().identity_token() or ""
    with pytest.raises(jwt.InvalidAudienceError):
        verifier.verify(good, "https://someone-else.example")
    header, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps(claims | {"tenant": "payroll"}).encode()).rstrip(
        b"="
    )
    with pytest.raises(jwt.InvalidSignatureError):
        verifier.verify(f"{header}.{forged.decode()}.{signature}", "https://billing.example")
    time.sleep(2.2)
    with pytest.raises(jwt.ExpiredSignatureError):
        verifier.verify(short, "https://billing.example")


def test_a_key_that_does_not_open_with_the_configured_secret_says_so(settings: Any) -> None:
    key_ensure()
    settings.WORKLOAD_IDENTITY_KEY_SECRET = "not-the-secret-it-was-sealed-with"
    with pytest.raises(KeyUnavailable, match="does not open with this WORKLOAD_IDENTITY"):
        context().identity_token()


# --- rotation with overlap ------------------------------------------------------------------


def test_rotation_publishes_ahead_overlaps_and_retires_the_old_key(web: WebServer) -> None:
    verifier = Verifier(web)
    old = key_ensure()
    before = context().identity_token() or ""
    assert jwt.get_unverified_header(before)["kid"] == old.kid

    upcoming = key_rotate(ahead_s=600)
    published = [k["kid"] for k in httpx.get(verifier.config["jwks_uri"]).json()["keys"]]
    assert published == [old.kid, upcoming.kid]
    tokens.forget_signer()
    # Published, not signing yet: tokens still carry the old kid.
    assert jwt.get_unverified_header(context().identity_token() or "")["kid"] == old.kid

    # Its time comes: the new key signs, the old one's tokens still verify.
    IdentityKey.objects.filter(kid=upcoming.kid).update(signs_from=db_now())
    tokens.forget_signer()
    after = context().identity_token() or ""
    assert jwt.get_unverified_header(after)["kid"] == upcoming.kid
    assert verifier.verify(after, "https://billing.example")["attempt"] == 2
    assert verifier.verify(before, "https://billing.example")["attempt"] == 2

    # Once every token the old key can have signed has expired, it is no longer published.
    gone = db_now() - timedelta(seconds=MAX_TOKEN_LIFETIME_S + SIGNER_CACHE_S + 1)
    IdentityKey.objects.filter(kid=old.kid).update(signs_from=gone - timedelta(days=1))
    IdentityKey.objects.filter(kid=upcoming.kid).update(signs_from=gone)
    published = [k["kid"] for k in httpx.get(verifier.config["jwks_uri"]).json()["keys"]]
    assert published == [upcoming.kid]
    with pytest.raises(jwt.PyJWKClientError):
        Verifier(web).verify(before, "https://billing.example")


def test_a_rotation_made_ahead_fails_no_verification(web: WebServer) -> None:
    """Tokens minted and verified without pause across `identity_keys rotate --ahead 3`,
    by a verifier whose cached key set lives 1 s: it has the new key before the key signs."""
    key_ensure()
    verifier = Verifier(web)
    verifier.keys = jwt.PyJWKClient(verifier.config["jwks_uri"], lifespan=1)
    failures: list[BaseException] = []
    kids: list[str] = []
    stop = threading.Event()

    def verify_fresh_tokens() -> None:
        try:
            while not stop.is_set():
                tokens.forget_signer()
                token = context().identity_token() or ""
                kid = jwt.get_unverified_header(token)["kid"]
                if not kids or kids[-1] != kid:
                    kids.append(kid)
                try:
                    verifier.verify(token, "https://billing.example")
                except Exception as exc:
                    failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=verify_fresh_tokens)
    thread.start()
    try:
        time.sleep(0.5)
        out = manage("identity_keys", "rotate", "--ahead", "3", url=database_url())
        assert "next (published, not signing yet)" in out
        deadline = time.monotonic() + 15
        while len(kids) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join(10)
    assert failures == [] and len(kids) == 2, (failures[:3], kids)


# --- targets run by a real worker ------------------------------------------------------------


def test_http_target_gets_a_bearer_token_beside_the_signature(
    worker: Proc, web: WebServer, module_ledger: Ledger, admin_principal: Principal
) -> None:
    module_ledger.requests.clear()
    audience = f"http://127.0.0.1:{module_ledger.port}"
    execution = run_to_end(
        admin_principal,
        {
            "type": "http",
            "url": f"{module_ledger.url}/hook",
            "method": "POST",
            "auth": {"type": "oidc", "audience": audience},
        },
    )
    assert execution.state == "succeeded", execution.error
    [request] = module_ledger.requests
    claims = Verifier(web).verify(bearer(request["headers"]), audience)
    assert claims["execution_id"] == str(execution.id)
    assert claims["schedule_id"] == str(execution.schedule_id)
    assert (claims["attempt"], claims["fencing_token"]) == (1, execution.fencing_token)
    assert claims["exp"] - claims["iat"] == 10  # the schedule's timeout
    assert request["headers"]["X-Signature"].startswith("sha256=")


def test_a_target_echoing_its_token_has_it_redacted_from_the_record(
    worker: Proc, web: WebServer, module_ledger: Ledger, admin_principal: Principal
) -> None:
    module_ledger.respond = lambda req: (200, {}, f"you sent {req['headers']}".encode())
    try:
        execution = run_to_end(
            admin_principal,
            {
                "type": "http",
                "url": f"{module_ledger.url}/echo",
                "method": "POST",
                "auth": {"type": "oidc", "audience": "echo"},
            },
        )
    finally:
        module_ledger.respond = lambda req: (200, {}, b"ok")
    token = bearer(module_ledger.requests[-1]["headers"])
    assert execution.state == "succeeded", execution.error
    assert "Bearer [redacted]" in execution.log_excerpt
    assert token not in execution.log_excerpt


def test_queue_message_carries_the_token_and_the_trace(
    worker: Proc, web: WebServer, admin_principal: Principal
) -> None:
    execution, message = run_queue_target(
        admin_principal,
        {
            "type": "queue",
            "broker": "default",
            "exchange": "",
            "routing_key": "billing.identity",
            "body": {"invoice": 42},
            "auth": {"type": "oidc", "audience": "billing-consumers"},
        },
    )
    claims = Verifier(web).verify(bearer(message.headers), "billing-consumers")
    assert claims["execution_id"] == str(execution.id) == message.payload["execution_id"]
    assert TRACEPARENT.match(message.headers["traceparent"])


def test_command_gets_the_token_and_the_trace_in_its_environment(
    worker: Proc, web: WebServer, admin_principal: Principal
) -> None:
    # The sandbox runs the command as an unprivileged user: a folder it can reach.
    base = Path(tempfile.mkdtemp(prefix="identity-test-", dir="/tmp"))
    base.chmod(0o755)
    out = base / "out"
    out.mkdir()
    out.chmod(0o777)
    ManagedCommand.objects.create(
        name="whoami",
        argv=[
            "/bin/sh",
            "-c",
            f'printf %s "$SCHED_IDENTITY_TOKEN" > {out}/token; '
            'echo "token=$SCHED_IDENTITY_TOKEN traceparent=$TRACEPARENT"',
        ],
        writable_paths=[str(out)],
    )
    execution = run_to_end(
        admin_principal,
        {
            "type": "command",
            "command": "whoami",
            "args": {},
            "auth": {"type": "oidc", "audience": "reports"},
        },
    )
    assert execution.state == "succeeded", execution.error
    token = (out / "token").read_text()
    claims = Verifier(web).verify(token, "reports")
    assert claims["execution_id"] == str(execution.id)
    assert "token=[redacted] " in execution.log_excerpt and token not in execution.log_excerpt
    traceparent = execution.log_excerpt.split("traceparent=", 1)[1].split()[0]
    assert TRACEPARENT.match(traceparent)
    shutil.rmtree(base, ignore_errors=True)
