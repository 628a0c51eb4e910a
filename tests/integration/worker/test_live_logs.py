"""Live logs (dispatch/logs.py): a real worker runs a managed command that prints
while it runs, and its lines are readable through the API before the command ends,
followed to its end by `schedctl logs -f` (a real process), capped by bytes (10 MiB
printed, the newest cap kept), redacted of the run's identity token, shown on the
execution page; a handed-off target's heartbeat lines join its attempt's log; an
ended attempt's log is kept with the execution (Redis no longer needed) and sealed
against every later writer — a cancelled command still printing, the sweeper's
takeover, a stale fencing token; another tenant's execution is a 404."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from dispatch import completion, logs, services
from dispatch.models import Execution, ExecutionEvent, ManagedCommand
from dispatch.scheduler.sweeper import sweep_expired_leases
from dispatch.services.identity import key_ensure
from dispatch.states import EventKind
from dispatch.worker import vault as secret_backends
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.support.console_support import client_for, text, user
from tests.support.procs import ROOT, Proc, WebServer
from tests.support.rows import rows_containing
from tests.support.secret_forms import transformed
from tests.support.worker_support import (
    Pump,
    db_now,
    make_execution,
    make_schedule,
    publish,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CAP = 4096  # LIVE_LOG_MAX_BYTES of the module's worker (and of this test process)
# Tenant billing's env:API_KEY in the worker: characters every transformation changes.
SECRET = f"Fy/{os.urandom(6).hex()}+k=v&w x:Q~"
# Prints the secret as a careless command would: whole, then in every echoed form.
ECHO_FORMS = (
    "import os, sys; sys.path.insert(0, {root!r}); "
    "from tests.support.secret_forms import transformed; "
    "key = os.environ['API_KEY']; print('key', key, flush=True); "
    "[print('form', i, '<' + f + '>', flush=True) for i, f in enumerate(transformed(key))]"
)


class _Streaming(BaseHTTPRequestHandler):
    """A target whose answer comes line by line: text/plain progress, 0.3 s apart
    (longer than the live log's quiet second, so it is followed); a short text answer,
    complete at once (its excerpt is its record); or an image, which is no log's
    business."""

    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        if self.path == "/short":
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"done at once\n")
            return
        if self.path == "/image":
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(b"\x89PNG\r\n\x1a\nnot a line\n")
            return
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        for i in range(1, 9):
            self.wfile.write(f"progress {i}\n".encode())
            self.wfile.flush()
            time.sleep(0.3)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def streamer() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def worker_settings(platform_url: str, streamer: str) -> dict[str, Any]:
    # No bwrap needed to print lines: the sandbox is another module's subject.
    return {
        "concurrency": 2,
        "COMMAND_SANDBOX": "none",
        "PLATFORM_URL": platform_url,
        "LIVE_LOG_MAX_BYTES": str(CAP),
        "TARGET_TEST_ALLOW": streamer,
        "SECRETS_BACKEND": "env",
        secret_backends.env_name("billing", "API_KEY"): SECRET,
    }


@pytest.fixture(autouse=True)
def _cap(settings: Any) -> None:
    settings.LIVE_LOG_MAX_BYTES = CAP  # for the lines this process writes (heartbeats)


def kept(execution: Execution, attempt: int = 1) -> dict[str, Any]:
    """The attempt's log as the execution keeps it (its `attempt_log` event)."""
    events = list(
        ExecutionEvent.objects.filter(
            execution_id=execution.id, kind=EventKind.ATTEMPT_LOG, data__attempt=attempt
        ).values_list("data", flat=True)
    )
    assert len(events) == 1, events
    data: dict[str, Any] = events[0]
    return data


def live_keys(execution: Execution, attempt: int = 1) -> tuple[int, dict[bytes, bytes]]:
    """The attempt's Redis stream length and its accounting hash."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    name = logs.key(str(execution.id), attempt)
    return int(r.xlen(name)), r.hgetall(logs.meta_key(name))


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
    # Kept with the execution: the stream is gone from Redis, the same lines under the
    # same cursors come from the database, and a follower's last cursor reads nothing new.
    assert [x[3] for x in kept(execution)["lines"]] == seen
    assert live_keys(execution)[0] == 0
    again = api.get(url).json()
    assert [x["text"] for x in again["lines"]] == seen and again["live"] is False
    assert [x["cursor"] for x in again["lines"]][-1] == cursor
    assert api.get(url, params={"after": cursor}).json()["lines"] == []
    middle = again["lines"][2]["cursor"]
    assert [x["text"] for x in api.get(url, params={"after": middle}).json()["lines"]] == seen[3:]
    # The timeline does not carry the log.
    assert "attempt_log" not in api.get(f"/v1/executions/{execution.id}").text


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


def newest_within(lines: list[str], cap: int) -> list[str]:
    """The newest lines whose text fits in `cap` bytes, oldest first."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line.encode())
        if size > cap:
            break
        kept.insert(0, line)
    return kept


def test_a_log_keeps_its_newest_bytes_and_never_the_identity_token(
    api: httpx.Client, admin_principal: Principal
) -> None:
    key_ensure()
    execution = printing(
        admin_principal,
        'echo "token $SCHED_IDENTITY_TOKEN"; i=0; while [ $i -lt 2000 ]; do i=$((i+1)); '
        "echo n$i; done",
        auth={"type": "oidc", "audience": "reports"},
    )
    Pump().until(lambda: state_of(execution) == "succeeded", timeout=30)
    page = api.get(f"/v1/executions/{execution.id}/log", params={"limit": 1000}).json()
    texts = [line["text"] for line in page["lines"]]
    printed = ["token [redacted]"] + [f"n{i}" for i in range(1, 2001)]
    expected = newest_within(printed, CAP)
    assert texts == expected[:1000]
    assert page["truncated"] is True and page["dropped_lines"] == len(printed) - len(expected)
    record = kept(execution)
    assert record["bytes"] == sum(len(x.encode()) for x in expected) <= CAP
    assert record["written_lines"] == len(printed)
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

    # The target's :succeed ends the attempt: its log is kept with the execution, and
    # the same capability can add no more lines (the attempt is over).
    done = httpx.post(
        f"{web.url}/v1/executions/{execution.id}:succeed",
        json={"output": {"rows": 10}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert done.status_code == 200, done.text
    assert [x[3] for x in kept(execution)["lines"]] == ["fetched 10 rows", "  indented"]
    assert live_keys(execution)[0] == 0
    html = text(client_for(viewer).get(f"/executions/{execution.id}/"))
    assert "fetched 10 rows" in html


def test_another_tenants_log_is_a_404_and_a_bad_query_a_400(
    api: httpx.Client, admin_principal: Principal
) -> None:
    theirs = Tenant.objects.create(slug="payroll", name="Payroll")
    other = Principal(tenant=theirs, role=Role.ADMIN, actor_kind="system", actor_id="t", label="t")
    foreign = make_execution(make_schedule(other, {"type": "http", "url": "https://x.example/h"}))
    logs.append(str(foreign.id), 1, "output", ["their secret line"], fencing_token=None)
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


def test_ten_mib_of_output_keeps_the_cap_and_says_truncated(
    api: httpx.Client, admin_principal: Principal
) -> None:
    # 10 MiB in 1,000-byte lines (10,486 of them, the last one short), then a marker.
    execution = printing(
        admin_principal,
        "head -c 10485760 /dev/zero | tr '\\000' x | fold -w 1000; echo; echo the-end",
    )
    Pump().until(lambda: state_of(execution) == "succeeded", timeout=60)
    record = kept(execution)
    texts = [x[3] for x in record["lines"]]
    assert record["bytes"] == sum(len(t.encode()) for t in texts) <= CAP
    assert texts[-1] == "the-end" and set(texts[:-1]) <= {"x" * 1000, "x" * 760}
    assert record["written_lines"] == 10485 + 2
    assert record["dropped_lines"] == record["written_lines"] - len(texts) > 10000
    page = api.get(f"/v1/executions/{execution.id}/log").json()
    assert page["truncated"] is True and page["dropped_lines"] == record["dropped_lines"]
    assert "the oldest" in kept_event_message(execution)


def kept_event_message(execution: Execution) -> str:
    return str(
        ExecutionEvent.objects.get(execution_id=execution.id, kind=EventKind.ATTEMPT_LOG).message
    )


def test_a_cancelled_command_still_printing_cannot_add_to_its_log(
    api: httpx.Client, admin_principal: Principal
) -> None:
    execution = printing(
        admin_principal, "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.05; done"
    )
    url = f"/v1/executions/{execution.id}/log"
    Pump().until(lambda: len(api.get(url).json()["lines"]) >= 5, timeout=30, what="five lines")
    services.execution_cancel(actor=admin_principal, execution_id=execution.id)
    sealed_at = time.time()
    # The worker stops the command at its next heartbeat (a third of its 3 s lease):
    # until then the command prints on, and every line it sends is refused.
    Pump().until(lambda: of_kind(execution, "cancelled_stop"), timeout=30, what="the stop")
    record = kept(execution)
    assert record["lines"] and max(x[1] for x in record["lines"]) <= sealed_at
    length, meta = live_keys(execution)
    assert length == 0 and int(meta[b"refused"]) > 0 and meta[b"sealed"] == b"1"
    texts = [x["text"] for x in api.get(url).json()["lines"]]
    assert texts == [x[3] for x in record["lines"]]
    assert texts == [f"tick {i}" for i in range(1, len(texts) + 1)]  # nothing lost before


def test_the_sweeper_seals_a_lapsed_attempts_log_against_its_stale_writer(
    admin_principal: Principal,
) -> None:
    schedule = make_schedule(admin_principal, {"type": "http", "url": "https://x.example/h"})
    execution = make_execution(schedule)
    Execution.objects.filter(id=execution.id).update(
        state="running",
        fencing_token=4,
        started_at=db_now(),
        lease_owner="gone-worker",
        lease_expires_at=db_now() - timedelta(seconds=1),
    )
    eid = str(execution.id)
    assert (
        logs.append(eid, 1, "output", ['before the lapse: naïve ☃ 🚀 \\ "q"'], fencing_token=4) == 1
    )
    # A writer with an older token of the same attempt is refused, a newer one taken.
    assert logs.append(eid, 1, "output", ["from token 3"], fencing_token=3) == logs.STALE
    assert logs.append(eid, 1, "output", ["from token 5"], fencing_token=5) == 1
    assert logs.append(eid, 1, "output", ["token 4 again"], fencing_token=4) == logs.STALE
    assert sweep_expired_leases(partitions=None) == 1
    assert state_of(execution) == "retry_scheduled"
    assert [x[3] for x in kept(execution)["lines"]] == [
        'before the lapse: naïve ☃ 🚀 \\ "q"',
        "from token 5",
    ]
    assert logs.append(eid, 1, "output", ["after the sweep"], fencing_token=5) == logs.SEALED
    assert live_keys(execution)[0] == 0


def of_kind(execution: Execution, kind: str) -> list[ExecutionEvent]:
    return list(ExecutionEvent.objects.filter(execution_id=execution.id, kind=kind))


def test_an_http_targets_text_answer_is_its_log_as_it_streams(
    api: httpx.Client, admin_principal: Principal, streamer: str
) -> None:
    schedule = make_schedule(
        admin_principal, {"type": "http", "url": f"http://{streamer}/progress"}, timeout_s=60
    )
    execution = make_execution(schedule)
    publish(execution.id)
    url = f"/v1/executions/{execution.id}/log"
    first = api.get(url, params={"wait": 20}).json()
    # The first lines are there while the response is still coming.
    assert first["lines"][0]["text"] == "progress 1" and state_of(execution) == "running"
    Pump().until(lambda: state_of(execution) == "succeeded", timeout=30)
    lines = kept(execution)["lines"]
    assert [x[3] for x in lines] == [f"progress {i}" for i in range(1, 9)]
    # Stored as they came, not at the end: the answer took 2.4 s, its first line was
    # stored (after the quiet second) more than half a second before its last.
    assert lines[-1][1] - lines[0][1] > 0.5, lines

    for path in ("short", "image"):
        quiet = make_execution(
            make_schedule(admin_principal, {"type": "http", "url": f"http://{streamer}/{path}"})
        )
        publish(quiet.id)
        Pump().until(lambda q=quiet: state_of(q) == "succeeded", timeout=30)
        assert api.get(f"/v1/executions/{quiet.id}/log").json()["lines"] == [], path
        assert not of_kind(quiet, "attempt_log"), path
        assert live_keys(quiet) == (0, {}), "no live log was written, none sealed"
        quiet.refresh_from_db()
        assert ("done at once" if path == "short" else "PNG") in quiet.log_excerpt


def test_no_echoed_form_of_a_secret_reaches_a_stored_line(
    api: httpx.Client, admin_principal: Principal
) -> None:
    name = f"echoer-{time.monotonic_ns()}"
    ManagedCommand.objects.create(
        name=name,
        argv=[sys.executable, "-c", ECHO_FORMS.format(root=str(ROOT))],
        env=["API_KEY"],
    )
    schedule = make_schedule(
        admin_principal,
        {
            "type": "command",
            "command": name,
            "args": {},
            "env": {"API_KEY": {"secret": "env:API_KEY"}},
        },
        timeout_s=60,
    )
    execution = make_execution(schedule)
    publish(execution.id)
    Pump().until(lambda: state_of(execution) in {"succeeded", "dead"}, timeout=30)
    assert state_of(execution) == "succeeded"
    texts = [x[3] for x in kept(execution)["lines"]]
    forms = transformed(SECRET)
    assert texts[0] == "key [redacted]" and len(texts) == 1 + len(forms), texts
    for text_ in texts[1:]:  # an embedding (Basic auth) keeps its edges, not the secret
        assert "[redacted]" in text_, text_
        assert not any(form in text_ for form in (SECRET, *forms)), text_
    # Nowhere in the database: not in the kept log, not in the excerpt, not anywhere.
    for form in (SECRET, *forms):
        assert rows_containing(form) == {}, form
