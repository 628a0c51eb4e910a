"""The demo `make run` seeds, so a newcomer sees the product work in the first minute.

A small HTTP receiver on loopback (`python -m dispatch.demo PORT`, started by
run_platform next to web, beat and workers) and three schedules in the demo
tenant that call it: two succeed, one always gets a 503 and shows retries and
a failed execution. Workers may reach the receiver's exact address only
(TARGET_TEST_ALLOW, as for the tests' receivers); loopback stays denied for
everything else.

Seeding is idempotent: a schedule that exists (or was deleted by the user) is
not created again; a live one still pointing at the receiver is moved to the
receiver's current port.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tenants.models import Tenant

HOST = "127.0.0.1"
FAIL_BODY = (
    "demo receiver: /fail always answers 503 Service Unavailable, "
    "to show retries and a failed execution"
)


def schedules(base: str) -> list[dict[str, Any]]:
    """The demo schedules, calling the receiver at `base` (http://127.0.0.1:PORT)."""
    return [
        {
            "name": "demo-heartbeat",
            "cron": "* * * * *",
            "timezone": "UTC",
            "target": {"type": "http", "method": "POST", "url": f"{base}/ok", "timeout_s": 10},
            "retry": {"max_attempts": 3, "backoff": "fixed", "initial_s": 5},
        },
        {
            "name": "demo-report",
            "cron": "*/15 * * * *",
            "timezone": "Europe/Amsterdam",
            "target": {"type": "http", "method": "GET", "url": f"{base}/report", "timeout_s": 10},
            "retry": {"max_attempts": 3, "backoff": "exponential", "initial_s": 10},
        },
        {
            "name": "demo-failing",
            "cron": "*/10 * * * *",
            "timezone": "UTC",
            "target": {"type": "http", "method": "POST", "url": f"{base}/fail", "timeout_s": 10},
            "retry": {"max_attempts": 2, "backoff": "fixed", "initial_s": 5},
        },
    ]


def _port_of(url: str) -> int | None:
    parts = urlsplit(url)
    return parts.port if parts.hostname == HOST else None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        # As the receiver binds (http.server sets it): connections the last run
        # answered linger in TIME_WAIT and must not make its port look taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def choose_port(tenant: Tenant, requested: int = 0) -> int:
    """The receiver's port: `requested` if given, else the one the demo schedules
    already call (so a restart changes nothing) when it is free, else a free one."""
    from dispatch.models import Schedule

    if requested:
        return requested
    names = [s["name"] for s in schedules("")]
    for target in Schedule.objects.filter(
        tenant=tenant, name__in=names, deleted_at__isnull=True
    ).values_list("target", flat=True):
        port = _port_of(str(target.get("url", "")))
        if port and port_free(port):
            return port
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def seed(tenant: Tenant, base: str) -> list[str]:
    """Create the missing demo schedules (and run each once now, so there is
    something to see before the next minute); return what was created or moved."""
    from dispatch import services
    from dispatch.exceptions import TriggerLimited
    from dispatch.models import Schedule
    from tenants.roles import Principal, Role

    actor = Principal(
        tenant=tenant,
        role=Role.ADMIN,
        actor_kind="system",
        actor_id="make-run",
        label="make run (demo)",
    )
    done = []
    new_port = _port_of(base)
    for spec in schedules(base):
        existing = Schedule.objects.filter(tenant=tenant, name=spec["name"])
        live = existing.filter(deleted_at__isnull=True).first()
        if live is None:
            if existing.exists():
                continue  # the user deleted it: do not bring it back
            schedule = services.schedule_create(actor=actor, data=spec)
            with contextlib.suppress(TriggerLimited):  # a full quota: the cron fires it soon
                services.schedule_trigger(actor=actor, schedule_id=schedule.id)
            done.append(f"created {spec['name']}")
            continue
        url = str(live.target.get("url", ""))
        old_port = _port_of(url)
        if (
            old_port
            and old_port != new_port
            and urlsplit(url).path == urlsplit(spec["target"]["url"]).path
        ):
            target = {**live.target, "url": spec["target"]["url"]}
            services.schedule_update(
                actor=actor, schedule_id=live.id, data={"target": target}, expected_version=None
            )
            done.append(f"moved {spec['name']} to port {new_port}")
    return done


class _Handler(BaseHTTPRequestHandler):
    server_version = "demo-receiver"

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = urlsplit(self.path).path
        execution = self.headers.get("X-Execution-Id", "")
        if path in ("/ok", "/report"):
            payload = {"ok": True, "path": path, "execution_id": execution}
            if path == "/report":
                payload["report"] = {"rows": 42, "note": "a demo report"}
            self._reply(200, json.dumps(payload).encode(), "application/json")
        elif path == "/fail":
            self._reply(503, FAIL_BODY.encode(), "text/plain; charset=utf-8")
        else:
            self._reply(404, b"demo receiver: try /ok, /report or /fail", "text/plain")

    do_GET = do_POST = do_PUT = _handle

    def log_message(self, *args: Any) -> None:
        pass  # the console shows every call; keep make run's terminal quiet


def serve(port: int) -> None:
    server = ThreadingHTTPServer((HOST, port), _Handler)
    server.daemon_threads = True
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    import signal

    # run_platform stops its children with SIGTERM: leave quietly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(int(sys.argv[1]))
