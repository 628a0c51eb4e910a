"""Live logs of an attempt: what a managed command prints while it runs, and the
lines a handed-off target sends with its heartbeats (dispatch/completion.py),
readable — and followable — while the attempt runs and for LIVE_LOG_RETENTION_S
after it.

Each attempt's lines are a Redis stream (`dispatch:log:<execution>:<attempt>`),
capped at LIVE_LOG_MAX_LINES (the oldest go first) and LIVE_LOG_LINE_CHARS a line,
expiring LIVE_LOG_RETENTION_S after the last line. The stream id is the reader's
cursor, and a follower blocks on it (XREAD BLOCK) instead of polling. Lines are
redacted of the attempt's secrets before they are stored, like the excerpt.

Live logs are a view, never a record: the execution keeps its excerpt in the
database as before, and a Redis that is away costs the live view, never the run
(appends give up quietly, once logged per attempt).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from dispatch.exceptions import LiveLogUnavailable

log = logging.getLogger("dispatch.logs")

STREAMS = ("output", "target")
FOLLOW_MAX_S = 20.0
READ_MAX_LINES = 1000

# Two clients per process (rebuilt after a fork: sockets are not shared): a reader's
# socket waits longer than a follower blocks; a writer's gives up in a second, so a
# Redis that hangs never holds a command's output pipe for long.
_clients: dict[str, Any] = {}
_clients_pid = 0


def _redis(role: str = "read") -> Any:
    global _clients_pid
    if _clients_pid != os.getpid():
        _clients.clear()
        _clients_pid = os.getpid()
    if role not in _clients:
        import redis

        wait = FOLLOW_MAX_S + 5 if role == "read" else 1.0
        _clients[role] = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=wait, socket_connect_timeout=1
        )
    return _clients[role]


def key(execution_id: str, attempt: int) -> str:
    return f"dispatch:log:{execution_id}:{attempt}"


def append(execution_id: str, attempt: int, stream: str, lines: Iterable[str]) -> int:
    """Add lines to the attempt's log; how many were stored (0 when Redis is away)."""
    import redis

    limit = int(settings.LIVE_LOG_LINE_CHARS)
    batch = [line[:limit] for line in lines]
    if not batch:
        return 0
    name = key(execution_id, attempt)
    now = f"{time.time():.6f}"
    keep = int(settings.LIVE_LOG_RETENTION_S)
    try:
        pipe = _redis("write").pipeline(transaction=False)
        for line in batch:
            pipe.xadd(
                name,
                {"at": now, "stream": stream, "text": line},
                maxlen=int(settings.LIVE_LOG_MAX_LINES),
                approximate=False,
            )
        # Every line written, kept or not: a reader tells how many the cap dropped.
        pipe.incrby(f"{name}:written", len(batch))
        pipe.expire(name, keep)
        pipe.expire(f"{name}:written", keep)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("live log of %s attempt %s not stored: %s", execution_id, attempt, exc)
        return 0
    return len(batch)


def dropped(execution_id: str, attempt: int) -> int:
    """Lines of the attempt's log the cap dropped (the oldest), 0 when none or unknown."""
    import redis

    name = key(execution_id, attempt)
    try:
        pipe = _redis().pipeline(transaction=False)
        pipe.get(f"{name}:written")
        pipe.xlen(name)
        written, kept = pipe.execute()
    except redis.RedisError:
        return 0
    return max(0, int(written or 0) - int(kept or 0))


@dataclass(frozen=True)
class Line:
    cursor: str
    at: datetime
    stream: str
    text: str


def read(
    execution_id: str, attempt: int, *, after: str | None, limit: int, wait_s: float = 0.0
) -> list[Line]:
    """The attempt's lines after the cursor `after` (None: from the first kept), at most
    `limit`; with `wait_s`, waits that long for a first line when there is none yet.
    LiveLogUnavailable (503) when Redis does not answer."""
    import redis

    name = key(execution_id, attempt)
    client = _redis()
    start = "-" if after is None else f"({after}"
    try:
        rows = client.xrange(name, min=start, max="+", count=limit)
        if not rows and wait_s > 0:
            found = client.xread(
                {name: after or "0-0"}, count=limit, block=int(min(wait_s, FOLLOW_MAX_S) * 1000)
            )
            rows = found[0][1] if found else []
    except redis.RedisError as exc:
        raise LiveLogUnavailable(
            f"live logs are unavailable just now (Redis: {type(exc).__name__}); try again"
        ) from None
    return [_line(cursor, fields) for cursor, fields in rows]


def tail(execution_id: str, attempt: int, n: int) -> list[Line]:
    """The attempt's last `n` lines, oldest first; [] when Redis is away (a view only)."""
    import redis

    try:
        rows = _redis().xrevrange(key(execution_id, attempt), count=n)
    except redis.RedisError:
        return []
    return [_line(cursor, fields) for cursor, fields in reversed(rows)]


def _line(cursor: Any, fields: dict[Any, Any]) -> Line:
    def text(name: str) -> str:
        value = fields.get(name.encode(), b"")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    return Line(
        cursor=cursor.decode() if isinstance(cursor, bytes) else str(cursor),
        at=datetime.fromtimestamp(float(text("at") or 0), tz=UTC),
        stream=text("stream"),
        text=text("text"),
    )


def valid_cursor(value: str) -> bool:
    """A stream id as read() hands them out: `<ms>-<seq>`."""
    ms, sep, seq = value.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit() and len(value) <= 40


class LineWriter:
    """Bytes a process prints, as lines of the attempt's live log: split at newlines
    (a partial line waits for its end, or for close()), decoded leniently, redacted."""

    def __init__(
        self, execution_id: str, attempt: int, *, stream: str, redact: Callable[[str], str]
    ) -> None:
        self.execution_id = execution_id
        self.attempt = attempt
        self.stream = stream
        self.redact = redact
        self._partial = b""
        self._dead = False  # Redis refused once: no more tries for this attempt

    def feed(self, chunk: bytes) -> None:
        data = self._partial + chunk
        *whole, self._partial = data.split(b"\n")
        limit = int(settings.LIVE_LOG_LINE_CHARS) * 4  # bytes: a character is at most 4
        if len(self._partial) > limit:  # a line without end: cut it where it is
            whole.append(self._partial)
            self._partial = b""
        self._send(whole)

    def close(self) -> None:
        if self._partial:
            self._send([self._partial])
            self._partial = b""

    def _send(self, raw: list[bytes]) -> None:
        lines = [self.redact(r.decode("utf-8", "replace").rstrip("\r")) for r in raw]
        if lines and not self._dead:
            self._dead = append(self.execution_id, self.attempt, self.stream, lines) == 0
