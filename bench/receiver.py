"""The loopback HTTP receiver: a no-op target for the end-to-end benchmark, and
(recording every request) the tests' ledger — one implementation for both.

It answers 200 at once (or what `respond` says) and counts deliveries per
X-Execution-Id, so duplicate deliveries show up next to duplicate execution rows.
With `record=True` it also keeps every request and applies the effect once per
X-Execution-Id (an idempotent target, as the contract asks).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What the receiver answers a recorded request with: (status, headers, body).
Respond = Callable[[dict[str, Any]], tuple[int, dict[str, str], bytes]]


def ok(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return 200, {}, b"ok"


class Receiver:
    def __init__(
        self, respond: Respond | None = None, *, record: bool = False, keep_alive: bool = True
    ) -> None:
        self.deliveries: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.effects: dict[str, int] = {}
        self.respond: Respond = respond or ok
        self.record = record
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 keeps the workers' connections open (the benchmark's no-op target);
            # HTTP/1.0 closes each one after its reply.
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                eid = self.headers.get("X-Execution-Id")
                req: dict[str, Any] = {}
                if receiver.record:
                    req = {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                        "body": body.decode(errors="replace"),
                        "at": time.time(),
                    }
                with receiver._lock:
                    receiver.deliveries[eid or ""] += 1
                    if receiver.record:
                        receiver.requests.append(req)
                        if eid:
                            receiver.effects.setdefault(eid, 1)
                status, headers, payload = receiver.respond(req)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def allow_entry(self) -> str:
        """The TARGET_TEST_ALLOW entry that lets a worker past the SSRF guard to this port only."""
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def dump(self) -> str:
        """The recorded requests, for an assertion's message."""
        return json.dumps(self.requests, indent=1, default=str)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
