"""Live logs (dispatch/logs.py): a real worker runs a managed command that prints
while it runs, and its lines are readable through the API before the command ends,
followed to its end by `schedctl logs -f` (a real process), capped, redacted of the
run's identity token, shown on the execution page; a handed-off target's heartbeat
lines join its attempt's log; another tenant's execution is a 404."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from dispatch import completion, logs
from dispatch.models import Execution, ManagedCommand
from dispatch.services.identity import key_ensure
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.support.console_support import client_for, text, user
from tests.support.procs import ROOT, Proc, WebServer
from tests.support.worker_support import (
    Pump,
    db_now,
    make_execution,
    make_schedule,
    publish,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CAP = 50  # LIVE_LOG_MAX_LINES of the module's worker


@pytest.fixture(scope="module")
def worker_settings(platform_url: str) -> dict[str, Any]:
    # No bwrap needed to print lines: the sandbox is another module's subject.
    return {
        "concurrency": 2,
        "COMMAND_SANDBOX": "none",
        "PLATFORM_URL": platform_url,
        "LIVE_LOG_MAX_LINES": str(CAP),
    }


@pytest.fixture
def api(web: WebServer, worker: Proc, admin_principal: Principal) -> httpx.Client:
    _, raw = tenant_services.token_issue(
        tenant=admin_principal.tenant, name="log-reader", role=Role.VIEWER
    )
    return httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30)


def printing(principal: Principal, script: str, **target: Any) -> Execution:
    name = f"printer-{time.monotonic_ns()}"
    ManagedCommand.objects.create(name=name, argv=["/bin/sh", "-c", script])
    schedule = make_schedule(
        principal, {"type": "command", "command": name, "args": {}, **target}, timeout_s=60
    )
    execution = make_execution(schedule)
    publish(execution.id)
    return execution


def test_a_commands_lines_are_readable_while_it_runs_and_after(
    api: httpx.Client, admin_principal: Principal
) -> None:
    execution = printing(
        admin_principal, "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done; printf tail"
    )
    url = f"/v1/executions/{execution.id}/attempts/1/log"
    # Followed: the first answer comes with the first line, while the command runs.
    first = api.get(url, params={"wait": 20}).json()
    assert first["lines"][0]["text"] == "line 1" and first["lines"][0]["stream"] == "output"
    assert first["live"] is True and state_of(execution) == "running"
    assert first["truncated"] is False
    seen = [line["text"] for line in first["lines"]]
    cursor = first["next_cursor"]
    while True:
        page = api.get(url, params={"after": cursor, "wait": 20}).json()
        seen += [line["text"] for line in page["lines"]]
        cursor = page["next_cursor"]
        if not page["lines"] and not page["live"]:
            break
    # Each line once, in order; the unterminated last one too.
    assert seen == ["line 1", "line 2", "line 3", "line 4", "line 5", "tail"]
    assert state_of(execution) == "succeeded"


def test_schedctl_follows_a_log_to_its_end(
    api: httpx.Client, web: WebServer, admin_principal: Principal
) -> None:
    execution = printing(admin_principal, "for i in 1 2 3; do echo step $i; sleep 0.5; done")
    token = api.headers["Authorization"].removeprefix("Bearer ")
    follow = subprocess.run(
        [sys.executable, "-m", "scheduler_client.cli", "logs", str(execution.id), "-f"],
        cwd=ROOT,
        env={"SCHEDCTL_URL": web.url, "SCHEDCTL_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert follow.returncode == 0, follow.stderr
    texts = [line.split(None, 2)[2] for line in follow.stdout.splitlines()]
    assert texts == ["step 1", "step 2", "step 3"]
    assert state_of(execution) == "succeeded"  # it returned when the attempt ended


def test_a_log_keeps_its_newest_lines_and_never_the_identity_token(
    api: httpx.Client, admin_principal: Principal
) -> None:
    key_ensure()
    execution = printing(
        admin_principal,
        'echo "token $SCHED_IDENTITY_TOKEN"; i=0; while [ $i -lt 120 ]; do i=$((i+1)); '
        "echo n$i; done",
        auth={"type": "oidc", "audience": "reports"},
    )
    Pump().until(lambda: state_of(execution) == "succeeded", timeout=30)
    page = api.get(f"/v1/executions/{execution.id}/log", params={"limit": 1000}).json()
    texts = [line["text"] for line in page["lines"]]
    assert texts == [f"n{i}" for i in range(71, 121)]  # the newest CAP lines
    assert page["truncated"] is True and page["dropped_lines"] == 121 - CAP
    stored = redis.Redis.from_url(settings.REDIS_URL).xlen(logs.key(str(execution.id), 1))
    assert stored == CAP
    # A line with the run's identity token is stored redacted.
    early = printing(
        admin_principal,
        'echo "token $SCHED_IDENTITY_TOKEN"',
        auth={"type": "oidc", "audience": "reports"},
    )
    Pump().until(lambda: state_of(early) == "succeeded", timeout=30)
    line = api.get(f"/v1/executions/{early.id}/log").json()["lines"][0]["text"]
    assert line == "token [redacted]"


def test_heartbeat_lines_join_the_attempts_log_and_the_page_shows_them(
    api: httpx.Client, web: WebServer, admin_principal: Principal
) -> None:
    schedule = make_schedule(
        admin_principal,
        {
            "type": "http",
            "url": "https://reports.example/run",
            "completion": "callback",
            "heartbeat_s": 30,
        },
        timeout_s=60,
    )
    execution = make_execution(schedule)
    Execution.objects.filter(id=execution.id).update(
        state="running", fencing_token=1, started_at=db_now()
    )
    token = completion.issue(execution_id=str(execution.id), attempt=1, fencing_token=1)
    beat = httpx.post(
        f"{web.url}/v1/executions/{execution.id}:heartbeat",
        json={"progress": 10, "log": ["fetched 10 rows", "  indented"]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert beat.status_code == 200, beat.text
    page = api.get(f"/v1/executions/{execution.id}/attempts/1/log").json()
    assert [(x["stream"], x["text"]) for x in page["lines"]] == [
        ("target", "fetched 10 rows"),
        ("target", "  indented"),
    ]
    too_many = httpx.post(
        f"{web.url}/v1/executions/{execution.id}:heartbeat",
        json={"log": ["x"] * (completion.MAX_LOG_LINES + 1)},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert too_many.status_code == 400 and "log" in too_many.json()["error"]["detail"]

    viewer = user("vera")
    tenant_services.membership_set(
        tenant=admin_principal.tenant, user=viewer, role=Role.VIEWER, actor=None
    )
    html = text(client_for(viewer).get(f"/executions/{execution.id}/"))
    assert 'id="execution-live-log"' in html and "fetched 10 rows" in html


def test_another_tenants_log_is_a_404_and_a_bad_query_a_400(
    api: httpx.Client, admin_principal: Principal
) -> None:
    theirs = Tenant.objects.create(slug="payroll", name="Payroll")
    other = Principal(tenant=theirs, role=Role.ADMIN, actor_kind="system", actor_id="t", label="t")
    foreign = make_execution(make_schedule(other, {"type": "http", "url": "https://x.example/h"}))
    logs.append(str(foreign.id), 1, "output", ["their secret line"])
    answer = api.get(f"/v1/executions/{foreign.id}/log")
    assert answer.status_code == 404 and "their secret line" not in answer.text
    mine = make_execution(
        make_schedule(admin_principal, {"type": "http", "url": "https://x.example/h"})
    )
    assert api.get(f"/v1/executions/{foreign.id}/attempts/1/log").status_code == 404
    assert api.get(f"/v1/executions/{mine.id}/attempts/2/log").status_code == 404  # not yet
    for params, field in (
        ({"after": "not-a-cursor"}, "after"),
        ({"wait": 99}, "wait"),
        ({"colour": "red"}, "colour"),
    ):
        bad = api.get(f"/v1/executions/{mine.id}/log", params=params)
        assert bad.status_code == 400 and field in bad.json()["error"]["detail"], params
