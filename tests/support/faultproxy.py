"""A userspace TCP fault proxy of the suite's own, between a process and a server.

`FaultProxy(target)` listens on a free loopback port and forwards every
connection to `target` — `(host, port)` or a Unix socket path (the embedded
PostgreSQL and Redis listen on sockets only). The test process switches it at
runtime:

* `pass_()` — forward both ways (the default; also how a fault heals);
* `blackhole()` — accept and keep connections but forward nothing, either way.
  Nothing is dropped: the proxy stops reading, so bytes wait in the socket
  buffers, as packets a partition delays until TCP retransmits them. A new
  connection is accepted and connected upstream only once the fault heals;
* `delay(ms)` — every chunk waits `ms` more, each way (pipelined: latency per
  chunk, not a throughput limit);
* `reset()` — close every current connection with an RST (`SO_LINGER` 0) on
  the client's side and drop the upstream one; `refuse()` keeps resetting every
  new connection until the next mode change.

`arm(pattern, then)` switches to a mode by itself right after forwarding a
client chunk that contains `pattern` (e.g. a statement's text): the statement
runs, its reply is what the fault holds back. `armed.wait()` says it fired.

One asyncio loop in a daemon thread serves everything; the control methods are
thread-safe and return once the change applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

Mode = Literal["pass", "blackhole", "delay", "refuse"]
Target = tuple[str, int] | str
CHUNK = 64 * 1024


@dataclass(eq=False)  # identity: one object per connection, kept in a set
class _Pair:
    """One proxied connection: the client's side and the upstream side."""

    client_writer: asyncio.StreamWriter
    upstream_writer: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with an RST, not a FIN: linger on with a zero timeout, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self, target: Target, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self.host = host
        self.mode: Mode = "pass"
        self.delay_s = 0.0
        self.accepted = 0
        self.resets = 0
        self.bytes_up = 0  # client -> server
        self.bytes_down = 0  # server -> client
        self.armed = threading.Event()
        self._arm: tuple[bytes, Mode, float] | None = None
        self._pairs: set[_Pair] = set()
        self._loop = asyncio.new_event_loop()
        self._healed: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(port, ready), name="faultproxy", daemon=True
        )
        self._thread.start()
        if not ready.wait(10) or self._server is None:
            raise RuntimeError("fault proxy did not start")
        self.port: int = self._server.sockets[0].getsockname()[1]

    # --- control (any thread) ---------------------------------------------------------

    def pass_(self) -> None:
        self._call(self._set, "pass", 0.0)

    def blackhole(self) -> None:
        self._call(self._set, "blackhole", 0.0)

    def delay(self, ms: float) -> None:
        self._call(self._set, "delay", ms / 1000)

    def refuse(self) -> None:
        """Reset every current connection and every new one until the next mode change."""
        self._call(self._set, "refuse", 0.0)

    def reset(self) -> int:
        """RST every current connection (the mode stays); returns how many were reset."""
        return int(self._call(self._reset_all))

    def arm(self, pattern: bytes, then: Mode = "blackhole", delay_ms: float = 0.0) -> None:
        """Switch to `then` right after forwarding a client chunk containing `pattern`."""
        self.armed.clear()
        self._call(self._set_arm, (pattern, then, delay_ms / 1000))

    @property
    def connections(self) -> int:
        return int(self._call(lambda: len(self._pairs)))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- helpers for the platform's URLs ---------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def database_url(self, settings_dict: dict[str, Any]) -> str:
        """A DATABASE_URL for the database of `settings_dict`, through this proxy."""
        auth = quote(settings_dict["USER"] or "", safe="")
        if settings_dict.get("PASSWORD"):
            auth += ":" + quote(settings_dict["PASSWORD"], safe="")
        return f"postgresql://{auth}@{self.host}:{self.port}/{settings_dict['NAME']}"

    # --- the loop --------------------------------------------------------------------

    def _serve(self, port: int, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._healed = asyncio.Event()
            self._healed.set()
            self._server = await asyncio.start_server(self._accept, self.host, port)

        try:
            self._loop.run_until_complete(start())
        finally:
            ready.set()
        self._loop.run_forever()

    def _call(self, fn: Any, *args: Any) -> Any:
        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _set(self, mode: Mode, delay_s: float) -> None:
        assert self._healed is not None
        self.mode, self.delay_s = mode, delay_s
        if mode == "blackhole":
            self._healed.clear()
        else:
            self._healed.set()
        if mode == "refuse":
            self._reset_all()

    def _set_arm(self, arm: tuple[bytes, Mode, float]) -> None:
        self._arm = arm

    def _reset_all(self) -> int:
        pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair, rst=True)
        self.resets += len(pairs)
        return len(pairs)

    def _drop(self, pair: _Pair, *, rst: bool) -> None:
        if pair not in self._pairs:
            return
        self._pairs.discard(pair)
        for task in pair.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if rst:
            _rst(pair.client_writer)
            if pair.upstream_writer is not None:
                _rst(pair.upstream_writer)
        else:
            pair.client_writer.close()
            if pair.upstream_writer is not None:
                pair.upstream_writer.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            self._drop(pair, rst=False)

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self.target, str):
            return await asyncio.open_unix_connection(self.target, limit=CHUNK)
        host, port = self.target
        return await asyncio.open_connection(host, port, limit=CHUNK)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        pair = _Pair(client_writer=writer)
        self._pairs.add(pair)
        if self.mode == "refuse":
            self._drop(pair, rst=True)
            self.resets += 1
            return
        assert self._healed is not None
        try:
            await self._healed.wait()  # a black-holed connect waits for the heal
            up_reader, up_writer = await self._open_upstream()
        except (OSError, asyncio.CancelledError):
            self._drop(pair, rst=True)
            return
        if pair not in self._pairs:  # reset while connecting
            up_writer.transport.abort()
            return
        pair.upstream_writer = up_writer
        pair.tasks = [
            asyncio.ensure_future(self._pump(pair, reader, up_writer, up=True)),
            asyncio.ensure_future(self._pump(pair, up_reader, writer, up=False)),
        ]

    async def _pump(
        self,
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        up: bool,
    ) -> None:
        """Copy one direction: read, wait out the fault, write. EOF half-closes the other side."""
        assert self._healed is not None
        pending: asyncio.Queue[tuple[float, bytes, bool]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(pair, pending, writer, up=up))
        pair.tasks.append(sender)
        try:
            while True:
                await self._healed.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                fire = up and self._arm is not None and self._arm[0] in data
                await pending.put((time.monotonic() + self.delay_s, data, fire))
            await pending.put((0.0, b"", False))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            self._drop(pair, rst=True)
        except asyncio.CancelledError:
            sender.cancel()
            raise
        if all(t.done() or t is asyncio.current_task() for t in pair.tasks):
            self._drop(pair, rst=False)

    async def _send(
        self,
        pair: _Pair,
        pending: asyncio.Queue[tuple[float, bytes, bool]],
        writer: asyncio.StreamWriter,
        *,
        up: bool,
    ) -> None:
        try:
            await self._copy_out(pending, writer, up=up)
        except OSError:
            self._drop(pair, rst=True)

    async def _copy_out(
        self,
        pending: asyncio.Queue[tuple[float, bytes, bool]],
        writer: asyncio.StreamWriter,
        *,
        up: bool,
    ) -> None:
        assert self._healed is not None
        while True:
            at, data, fire = await pending.get()
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._healed.wait()
            if not data:
                if writer.can_write_eof():
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                return
            if up:
                self.bytes_up += len(data)
            else:
                self.bytes_down += len(data)
            writer.write(data)
            await writer.drain()
            if fire and self._arm is not None:
                # The matching chunk is on its way to the server: the fault holds
                # back what comes after it (its reply, the next statements).
                _, mode, delay_s = self._arm
                self._arm = None
                self._set(mode, delay_s)
                self.armed.set()


def database_target(settings_dict: dict[str, Any]) -> Target:
    """Where the database of `settings_dict` listens: a Unix socket path or (host, port)."""
    host = settings_dict.get("HOST") or "/var/run/postgresql"
    port = int(settings_dict.get("PORT") or 5432)
    if host.startswith("/"):
        return str(Path(host) / f".s.PGSQL.{port}")
    return (host, port)


@contextlib.contextmanager
def proxied(target: Target) -> Iterator[FaultProxy]:
    proxy = FaultProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
