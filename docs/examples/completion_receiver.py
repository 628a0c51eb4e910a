"""A reference receiver for `"completion": "callback"` HTTP targets.

It answers every POST `202 Accepted` at once and does the work on a thread,
heartbeating while it works and calling back when it is done, with the
scheduler_client package's Completion helper. The request's JSON body says what
the work is, so one receiver can play every case:

    {"work_s": 3, "beat_every_s": 1, "then": "succeed"}   # or "fail", "fail_permanently", "vanish"

Run it with `python completion_receiver.py --port 8085` and point a schedule's
target at it:

    {"type": "http", "url": "http://127.0.0.1:8085/report", "completion": "callback",
     "heartbeat_s": 10, "timeout_s": 600}

(The platform's SSRF guard refuses loopback addresses unless the tenant's egress
allow-list names them, as on a development machine.)
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scheduler_client import Completion, Conflict


def work(job: Completion, plan: dict[str, Any], execution_id: str) -> None:
    started = time.monotonic()
    work_s = float(plan.get("work_s", 1))
    beat_every_s = float(plan.get("beat_every_s", 1))
    try:
        while (done := time.monotonic() - started) < work_s:
            time.sleep(min(beat_every_s, work_s - done))
            if plan.get("then") != "vanish":
                job.heartbeat(progress=min(100.0, 100 * (time.monotonic() - started) / work_s))
        then = plan.get("then", "succeed")
        if then == "succeed":
            job.succeed({"execution_id": execution_id, "worked_s": round(work_s, 3)})
        elif then == "fail":
            job.fail("the report's source was not ready")
        elif then == "fail_permanently":
            job.fail("the report's definition is invalid", retryable=False)
        # "vanish": never call back (a crashed service); the platform retries.
    except Conflict as stale:
        # Cancelled, timed out or re-run meanwhile: this attempt's result is not wanted.
        print(f"{execution_id}: stopped, attempt no longer current ({stale.message})", flush=True)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        plan = json.loads(raw or b"{}")
        job = Completion.from_headers(self.headers)
        execution_id = self.headers.get("X-Execution-Id", "?")
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        threading.Thread(target=work, args=(job, plan, execution_id), daemon=True).start()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        print(f"{self.address_string()} {format % args}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8085)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening on http://{args.host}:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
