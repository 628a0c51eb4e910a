"""Secrets at run time (docs/explanation/executions.md, "Secrets at run time"): a sentinel
served by a
small server speaking Vault's KV v2 API reaches the outgoing request and nothing else."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Execution, ExecutionEvent
from dispatch.worker import vault as secret_backends
from tenants import services as tenant_services
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.ledger import Ledger, Respond
from tests.support.procs import Proc
from tests.support.rows import rows_containing
from tests.support.secret_forms import transformed
from tests.support.worker_support import (
    ONE_SHOT,
    QUICK_RETRY,
    Pump,
    final,
    kinds,
    make_execution,
    make_schedule,
    publish,
    run_to_end,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SENTINEL = "sntl-" + os.urandom(12).hex()
ENV_SENTINEL = "envsntl-" + os.urandom(12).hex()
# The other tenant's ("outsider", or "billing-eu" for env) secrets: billing must never get them.
OTHER_SENTINEL = "othersntl-" + os.urandom(12).hex()
EU_SENTINEL = "eusntl-" + os.urandom(12).hex()
# Characters every transformation changes: URL-encoding, base64, case.
FANCY = f"Fy/{os.urandom(6).hex()}+k=v&w x:Q~"
# Not Latin-1: no HTTP header can carry it.
SNOWMAN = f"snow-{os.urandom(6).hex()}\u2603x"
VAULT_TOKEN = "platform-token-for-tests"


class FakeVault:
    """Vault's KV v2 read API, as hvac speaks it: GET /v1/<mount>/data/<path>."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        vault = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                vault.reads.append(self.path)
                if self.headers.get("X-Vault-Token") != VAULT_TOKEN:
                    return self._send(403, {"errors": ["permission denied"]})
                path = self.path.split("?")[0]
                if path == "/v1/kv/data/billing/api":
                    data = {"token": SENTINEL}
                elif path == "/v1/kv/data/billing/forbidden":
                    return self._send(
                        403, {"errors": ["1 error occurred:\n\t* permission denied\n\n"]}
                    )
                elif path == "/v1/kv/data/billing/flaky":
                    return self._send(503, {"errors": ["Vault is sealed"]})
                elif path == "/v1/kv/data/billing/fancy":
                    data = {"token": FANCY}
                elif path == "/v1/kv/data/billing/snowman":
                    data = {"token": SNOWMAN}
                elif path in ("/v1/kv/data/outsider/db", "/v1/other/data/billing/db"):
                    # Another tenant's folder, and a mount the platform does not use.
                    data = {"password": OTHER_SENTINEL}
                else:
                    return self._send(404, {"errors": []})
                self._send(
                    200,
                    {
                        "request_id": "r",
                        "lease_id": "",
                        "renewable": False,
                        "lease_duration": 0,
                        "data": {
                            "data": data,
                            "metadata": {
                                "created_time": "2026-01-01T00:00:00Z",
                                "deletion_time": "",
                                "destroyed": False,
                                "version": 1,
                            },
                        },
                        "wrap_info": None,
                        "warnings": None,
                        "auth": None,
                    },
                )

            def _send(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def echo(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    # A careless target that echoes the request, credentials included.
    status = 500 if req["path"] == "/fail" else 200
    if req["path"] == "/transform":
        forms = transformed(req["headers"]["Authorization"])
        return 200, {}, ("\n".join(f"echo {i}: <{f}>" for i, f in enumerate(forms))).encode()
    return status, {}, json.dumps(req["headers"]).encode()


@pytest.fixture(scope="module")
def vault() -> Iterator[FakeVault]:
    vault = FakeVault()
    yield vault
    vault.close()


@pytest.fixture(scope="module")
def ledger_respond() -> Respond:
    return echo


@pytest.fixture(scope="module")
def worker_settings(vault: FakeVault, module_ledger: Ledger) -> dict[str, Any]:
    return {
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
        "SECRETS_BACKEND": "vault,env",
        "VAULT_ADDR": vault.url,
        "VAULT_TOKEN": VAULT_TOKEN,
        secret_backends.env_name("billing", "API_KEY"): ENV_SENTINEL,
        # Tenant billing-eu's DBPASS: it must not be billing's EU_DBPASS.
        secret_backends.env_name("billing-eu", "DBPASS"): EU_SENTINEL,
    }


def target(ledger: Ledger, ref: str, path: str = "/hook") -> dict[str, Any]:
    return {
        "type": "http",
        "url": f"{ledger.url}{path}",
        "method": "POST",
        "headers": {"Authorization": {"secret": ref}, "X-Plain": "hello"},
        "body": {"n": 1},
    }


def test_vault_sentinel_reaches_only_the_outgoing_request(
    worker: Proc,
    module_ledger: Ledger,
    vault: FakeVault,
    admin_principal: Principal,
    api: APIClient,
) -> None:
    ok = run_to_end(admin_principal, target(module_ledger, "vault:kv/billing/api#token"))
    failed = run_to_end(
        admin_principal, target(module_ledger, "vault:kv/billing/api#token", path="/fail")
    )

    assert ok.state == "succeeded", ok.error
    assert failed.state == "dead" and failed.status_code == 500
    sent = [r["headers"]["Authorization"] for r in module_ledger.requests]
    assert sent == [SENTINEL, SENTINEL]
    assert any(p.startswith("/v1/kv/data/billing/api") for p in vault.reads)
    # The target echoed it back: what we stored is redacted.
    assert "[redacted]" in ok.log_excerpt and "[redacted]" in failed.log_excerpt

    assert rows_containing(SENTINEL) == {}
    assert "dispatch_schedule" in rows_containing("vault:kv/billing/api#token")  # the scan works
    assert SENTINEL not in worker.output()
    for execution in (ok, failed):
        response = api.get(f"/v1/executions/{execution.id}")
        assert response.status_code == 200
        assert SENTINEL not in response.content.decode()
        assert response.json()["events"]
        response = api.get(f"/v1/schedules/{execution.schedule_id}")
        assert response.status_code == 200 and SENTINEL not in response.content.decode()
    listing = api.get("/v1/executions")
    assert listing.status_code == 200 and SENTINEL not in listing.content.decode()


def test_vault_forbidden_is_dead_at_once_without_calling(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    before = len(module_ledger.requests)
    execution = run_to_end(
        admin_principal,
        target(module_ledger, "vault:kv/billing/forbidden#token"),
        retry=QUICK_RETRY,
    )
    assert execution.state == "dead" and execution.attempt == 1
    assert execution.reason_code == "secret" and "403" in execution.error
    assert len(module_ledger.requests) == before


def test_vault_unavailable_is_retried(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    before = len(module_ledger.requests)
    execution = run_to_end(
        admin_principal,
        target(module_ledger, "vault:kv/billing/flaky#token"),
        retry={"max_attempts": 2, "backoff": "fixed", "initial_s": 0, "max_s": 0},
    )
    assert execution.state == "dead" and execution.attempt == 2
    assert "vault unavailable" in execution.error and "attempts exhausted" in execution.reason
    assert kinds(execution).count("retry_scheduled") == 1
    assert len(module_ledger.requests) == before


def test_env_secrets_are_tenant_scoped(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal, other_tenant: Any
) -> None:
    mine = run_to_end(admin_principal, target(module_ledger, "env:API_KEY"))
    assert mine.state == "succeeded"
    assert module_ledger.requests[-1]["headers"]["Authorization"] == ENV_SENTINEL

    count = len(module_ledger.requests)
    theirs = run_to_end(make_principal(other_tenant), target(module_ledger, "env:API_KEY"))
    assert theirs.state == "dead" and theirs.reason_code == "secret"
    assert "SCHED_SECRET_OUTSIDER__API_KEY" in theirs.error
    assert len(module_ledger.requests) == count
    assert rows_containing(ENV_SENTINEL) == {}
    assert not ExecutionEvent.objects.filter(message__contains=ENV_SENTINEL).exists()


def run_all(principal: Principal, targets: list[dict[str, Any]]) -> list[Execution]:
    executions = [make_execution(make_schedule(principal, t, retry=ONE_SHOT)) for t in targets]
    for execution in executions:
        publish(execution.id, 1)
    pump = Pump()
    for execution in executions:
        pump.until(final(execution), timeout=30)
    for execution in executions:
        execution.refresh_from_db()
    return executions


TRAVERSALS = [
    "vault:kv/billing/../outsider/db#password",
    "vault:kv/billing/x/../../outsider/db#password",
    "vault:kv/billing/./../outsider/db#password",
    "vault:kv/billing//../outsider/db#password",
    "vault:kv/billing/db/../../outsider/db#password",
    "vault:kv/billing/%2e%2e/outsider/db#password",
    "vault:kv/billing/%2E%2E/outsider/db#password",
    "vault:kv/billing/..%2foutsider/db#password",
    "vault:kv/billing/..\\outsider/db#password",
    "vault:kv/billing/.../outsider/db#password",
    "vault:other/billing/db#password",  # a mount of the tenant's choosing
]
# A value pasted where the reference goes: refused, and never quoted in the error.
PASTED = "pasted-" + os.urandom(8).hex()


def test_vault_traversal_never_reads_another_tenants_secret_at_run_time(
    worker: Proc, module_ledger: Ledger, vault: FakeVault, admin_principal: Principal
) -> None:
    """Rows written straight to the database (as an edit outside the API would):
    the worker parses the reference again and builds the path itself."""
    reads_before, requests_before = len(vault.reads), len(module_ledger.requests)
    refs = [*TRAVERSALS, PASTED]
    executions = run_all(admin_principal, [target(module_ledger, ref) for ref in refs])
    for ref, execution in zip(refs, executions, strict=True):
        assert execution.state == "dead" and execution.attempt == 1, (ref, execution.error)
        assert execution.reason_code == "secret", (ref, execution.error)
        assert OTHER_SENTINEL not in execution.error
    assert PASTED not in executions[-1].error and rows_containing(PASTED) == {
        "dispatch_schedule": 1
    }
    # Nothing was asked of Vault, and no request carried anything.
    assert vault.reads[reads_before:] == []
    assert len(module_ledger.requests) == requests_before
    assert rows_containing(OTHER_SENTINEL) == {}
    assert OTHER_SENTINEL not in worker.output()


def test_env_names_of_two_tenants_never_collide(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    """`billing` + EU_DBPASS and `billing-eu` + DBPASS were one variable."""
    eu = tenant_services.tenant_create(slug="billing-eu", name="Billing EU")
    mine, theirs = run_all(admin_principal, [target(module_ledger, "env:EU_DBPASS")])[0], None
    assert mine.state == "dead" and mine.reason_code == "secret", mine.error
    assert "SCHED_SECRET_BILLING__EU_DBPASS" in mine.error
    assert all(EU_SENTINEL not in str(r["headers"]) for r in module_ledger.requests)
    theirs = run_all(make_principal(eu), [target(module_ledger, "env:DBPASS")])[0]
    assert theirs.state == "succeeded", theirs.error
    assert module_ledger.requests[-1]["headers"]["Authorization"] == EU_SENTINEL


def test_transformed_echoes_of_a_secret_are_redacted(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    execution = run_all(
        admin_principal, [target(module_ledger, "vault:kv/billing/fancy#token", path="/transform")]
    )[0]
    assert execution.state == "succeeded", execution.error
    assert module_ledger.requests[-1]["headers"]["Authorization"] == FANCY
    excerpt = execution.log_excerpt
    forms = transformed(FANCY)
    assert excerpt.count("[redacted]") >= len(forms), excerpt
    for form in [FANCY, *forms]:
        assert form not in excerpt, (form, excerpt)
    # The secret's bits in the middle of the Basic-auth blob are gone too.
    assert base64.b64encode(FANCY.encode()).decode()[4:-4] not in excerpt
    for form in (FANCY, forms[0], forms[5], forms[8]):
        assert rows_containing(form) == {}, form


def test_a_secret_that_cannot_be_encoded_leaks_no_character(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    before = len(module_ledger.requests)
    execution = run_all(admin_principal, [target(module_ledger, "vault:kv/billing/snowman#token")])[
        0
    ]
    assert execution.state == "dead" and execution.reason_code == "bad_header", execution.error
    assert "Authorization" in execution.error
    events = " ".join(
        ExecutionEvent.objects.filter(execution=execution).values_list("message", flat=True)
    )
    for text in (execution.error, events, worker.output()):
        assert "\u2603" not in text and "\\u2603" not in text and "position" not in text
        assert SNOWMAN[:10] not in text
    assert len(module_ledger.requests) == before
