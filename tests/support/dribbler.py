"""A slow or hostile loopback peer: it answers, then dribbles the rest a little at a
time, each piece well inside any per-read timeout, so only a total deadline ends a
call to it."""

from __future__ import annotations

import socket
import threading


class Dribbler:
    """A loopback peer that sends `head`, then `unit` every `gap_s` seconds, `count`
    times, on every connection.

    By default an HTTP peer: it reads the request first, answers 200 with a
    Content-Length of `count` bytes and sends them one byte at a time. An SMTP peer
    (`reads_first=False`, `head=b""`, `unit=b"220-wait\\r\\n"`) speaks first and never
    finishes its greeting. `connections` counts the connections it accepted,
    `serving` those it is still dribbling to.
    """

    def __init__(
        self,
        *,
        gap_s: float,
        count: int,
        head: bytes | None = None,
        unit: bytes = b"x",
        reads_first: bool = True,
    ) -> None:
        self.gap_s, self.count, self.unit, self.reads_first = gap_s, count, unit, reads_first
        self.head = (
            f"HTTP/1.1 200 OK\r\nContent-Length: {count * len(unit)}\r\n\r\n".encode()
            if head is None
            else head
        )
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self._lock = threading.Lock()
        self.connections = 0
        self.serving = 0

    @property
    def allow_entry(self) -> str:
        """This peer in TARGET_TEST_ALLOW's form."""
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self.serving += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            with conn:
                if self.reads_first:
                    conn.recv(65536)
                conn.sendall(self.head)
                for _ in range(self.count):
                    if self.stop.wait(self.gap_s):
                        return
                    conn.sendall(self.unit)
        except OSError:
            return
        finally:
            with self._lock:
                self.serving -= 1

    def __enter__(self) -> Dribbler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()
