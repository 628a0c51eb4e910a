"""Live logs of an attempt: what a managed command prints while it runs, and the
lines a handed-off target sends with its heartbeats (dispatch/completion.py),
readable — and followable — while the attempt runs, and kept with the execution
once it ends.

While the attempt runs, its lines are a Redis stream (`dispatch:log:<execution>:
<attempt>`) beside a small hash of its accounting (`…:meta`): the text bytes kept,
the lines written and dropped, the highest fencing token that wrote, whether the log is
sealed, and the lines it refused. Every append is one Lua script, so the checks and the write are one
step: a sealed log takes no more lines, a writer whose fencing token is below one
that already wrote is refused (a stale attempt cannot write), and the log keeps its
newest LIVE_LOG_MAX_BYTES of text (the oldest lines go first, counted as dropped, so
a reader is told the log was truncated). The stream id is the reader's cursor; a
follower blocks on it (XREAD BLOCK) instead of polling. Lines are redacted of the
attempt's secrets before they are stored, like the excerpt.

When the attempt ends (its finish, its completion callback, the sweeper, a cancel),
`seal` closes the log and hands back what it holds; the caller keeps that with the
execution (dispatch/services/logs.py) — archived and dropped with its history — and
then `discard`s the stream. A Redis that is away costs the live view, never the run
(appends give up quietly, once logged per attempt); a log never sealed expires
LIVE_LOG_RETENTION_S after its last line.
"""

from __future__ import annotations

import json
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
# What append() answers besides a count of lines stored.
SEALED = -1
STALE = -2

# KEYS: the stream, its meta hash. ARGV: byte cap, seconds to keep, time, stream name,
# the writer's fencing token ("" when it has none), the lines as a JSON array (one
# argument: a thousand lines cost one string to pack, not a thousand).
_APPEND = """
local meta = KEYS[2]
local lines = cjson.decode(ARGV[6])
local n = #lines
if redis.call('HEXISTS', meta, 'sealed') == 1 then
  redis.call('HINCRBY', meta, 'refused', n)
  return -1
end
local token = tonumber(ARGV[5])
if token then
  local fence = tonumber(redis.call('HGET', meta, 'fence') or '0')
  if token < fence then
    redis.call('HINCRBY', meta, 'refused', n)
    return -2
  end
  if token > fence then redis.call('HSET', meta, 'fence', token) end
end
local cap = tonumber(ARGV[1])
local size = tonumber(redis.call('HGET', meta, 'bytes') or '0')
for _, line in ipairs(lines) do
  redis.call('XADD', KEYS[1], '*', 'at', ARGV[3], 'stream', ARGV[4], 'text', line)
  size = size + #line
end
local dropped = 0
while size > cap do
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 256)
  if #oldest == 0 then size = 0 break end
  local keep = nil
  for _, entry in ipairs(oldest) do
    if size <= cap then keep = entry[1] break end
    local fields = entry[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'text' then size = size - #fields[j + 1] end
    end
    dropped = dropped + 1
  end
  if keep then
    redis.call('XTRIM', KEYS[1], 'MINID', keep)
  else  -- every entry read goes: keep from just after the last of them
    local ms, seq = string.match(oldest[#oldest][1], '(%d+)-(%d+)')
    redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. (tonumber(seq) + 1))
  end
end
redis.call('HSET', meta, 'bytes', size)
redis.call('HINCRBY', meta, 'written', n)
if dropped > 0 then redis.call('HINCRBY', meta, 'dropped', dropped) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', meta, ARGV[2])
return n
"""

# KEYS: the stream, its meta hash. ARGV: seconds to keep the seal. Nil when the log
# was sealed already (someone else keeps it); else one JSON document of its lines
# ([cursor, at, stream, text], as the execution keeps them) and accounting: parsed in
# one C call, where a thousand entries as nested replies cost milliseconds of Python.
# A last entry without text wakes the followers blocked on the stream (they then find
# the attempt ended) instead of leaving them to their timeout.
_SEAL = """
if redis.call('HSETNX', KEYS[2], 'sealed', '1') == 0 then return false end
redis.call('EXPIRE', KEYS[2], ARGV[1])
local rows = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local f = {}
  for j = 1, #entry[2], 2 do f[entry[2][j]] = entry[2][j + 1] end
  if f['text'] then rows[#rows + 1] = {entry[1], tonumber(f['at']), f['stream'], f['text']} end
end
local meta = redis.call('HGETALL', KEYS[2])
local counts = {}
for j = 1, #meta, 2 do counts[meta[j]] = tonumber(meta[j + 1]) end
redis.call('XADD', KEYS[1], '*', 'sealed', '1')
redis.call('EXPIRE', KEYS[1], ARGV[1])
return cjson.encode({rows = rows, written = counts['written'] or 0,
                     dropped = counts['dropped'] or 0, bytes = counts['bytes'] or 0})
"""

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
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=wait, socket_connect_timeout=1
        )
        _clients[role] = client
        _clients[f"{role}:append"] = client.register_script(_APPEND)
        _clients[f"{role}:seal"] = client.register_script(_SEAL)
    return _clients[role]


def _script(role: str, name: str) -> Any:
    _redis(role)
    return _clients[f"{role}:{name}"]


def key(execution_id: str, attempt: int) -> str:
    return f"dispatch:log:{execution_id}:{attempt}"


def meta_key(name: str) -> str:
    return f"{name}:meta"


def append(
    execution_id: str,
    attempt: int,
    stream: str,
    lines: Iterable[str],
    *,
    fencing_token: int | None,
) -> int:
    """Add lines to the attempt's log under the writer's fencing token: how many were
    stored, 0 when Redis is away, SEALED when the attempt's log is closed, STALE when a
    later token of the attempt has written."""
    import redis

    limit = int(settings.LIVE_LOG_LINE_CHARS)
    batch = [line[:limit] for line in lines]
    if not batch:
        return 0
    name = key(execution_id, attempt)
    args = [
        int(settings.LIVE_LOG_MAX_BYTES),
        int(settings.LIVE_LOG_RETENTION_S),
        f"{time.time():.6f}",
        stream,
        "" if fencing_token is None else str(fencing_token),
        json.dumps(batch, ensure_ascii=False),
    ]
    try:
        stored = int(_script("write", "append")(keys=[name, meta_key(name)], args=args))
    except redis.RedisError as exc:
        log.warning("live log of %s attempt %s not stored: %s", execution_id, attempt, exc)
        return 0
    if stored < 0:
        log.info(
            "live log of %s attempt %s refused %d lines: %s",
            execution_id,
            attempt,
            len(batch),
            "the log is sealed" if stored == SEALED else "a later token wrote",
        )
    return stored


def dropped(execution_id: str, attempt: int) -> int:
    """Lines of the attempt's log the cap dropped (the oldest), 0 when none or unknown."""
    import redis

    try:
        value = _redis().hget(meta_key(key(execution_id, attempt)), "dropped")
    except redis.RedisError:
        return 0
    return int(value or 0)


@dataclass(frozen=True)
class Line:
    cursor: str
    at: datetime
    stream: str
    text: str


@dataclass(frozen=True)
class Sealed:
    """An ended attempt's log as the seal found it: its lines as the execution keeps
    them, [cursor, at (epoch seconds), stream, text], oldest first."""

    rows: list[list[Any]]
    written: int
    dropped: int
    bytes: int


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
    return _lines(rows)


def tail(execution_id: str, attempt: int, n: int) -> list[Line]:
    """The attempt's last `n` lines, oldest first; [] when Redis is away (a view only)."""
    import redis

    try:
        rows = _redis().xrevrange(key(execution_id, attempt), count=n)
    except redis.RedisError:
        return []
    return _lines(reversed(rows))


def seal(execution_id: str, attempt: int) -> Sealed | None:
    """Close the attempt's log to every writer and hand back what it holds; None when
    another caller sealed it first or Redis is away (the log then expires on its own).
    The stream stays readable until `discard`."""
    import redis

    name = key(execution_id, attempt)
    try:
        found = _script("write", "seal")(
            keys=[name, meta_key(name)], args=[int(settings.LIVE_LOG_RETENTION_S)]
        )
    except redis.RedisError as exc:
        log.warning("live log of %s attempt %s not sealed: %s", execution_id, attempt, exc)
        return None
    if not found:
        return None
    doc = json.loads(found)
    return Sealed(
        rows=doc["rows"] or [],  # Lua's empty table encodes as {}
        written=int(doc["written"]),
        dropped=int(doc["dropped"]),
        bytes=int(doc["bytes"]),
    )


def discard(execution_id: str, attempt: int) -> None:
    """Drop a sealed log's stream (it is kept elsewhere now); the seal stays, so a late
    writer is still refused until it expires."""
    import redis

    try:
        _redis("write").delete(key(execution_id, attempt))
    except redis.RedisError as exc:
        log.warning("live log of %s attempt %s not discarded: %s", execution_id, attempt, exc)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _lines(rows: Iterable[tuple[Any, dict[Any, Any]]]) -> list[Line]:
    """Stream entries as lines; the seal's wake-up entry (no text) is none."""
    return [_line(cursor, fields) for cursor, fields in rows if b"text" in fields]


def _line(cursor: Any, fields: dict[Any, Any]) -> Line:
    def text(name: str) -> str:
        return _text(fields.get(name.encode(), b""))

    return Line(
        cursor=_text(cursor),
        at=datetime.fromtimestamp(float(text("at") or 0), tz=UTC),
        stream=text("stream"),
        text=text("text"),
    )


def cursor_key(cursor: str) -> tuple[int, int]:
    """A cursor's order: stream ids compare as (milliseconds, sequence)."""
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq)


def valid_cursor(value: str) -> bool:
    """A stream id as read() hands them out: `<ms>-<seq>`."""
    ms, sep, seq = value.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit() and len(value) <= 40


class LineWriter:
    """Bytes a process prints, as lines of the attempt's live log under its fencing
    token: split at newlines (a partial line waits for its end, or for close()),
    decoded leniently, redacted.

    With `quiet_s`, lines are held until that long after the writer was made, and
    dropped if it is closed before: an answer that is complete at once (most HTTP
    calls) costs no live log at all — its excerpt is its record — while one that
    streams for longer is followed. `stored` counts the lines the log took."""

    def __init__(
        self,
        execution_id: str,
        attempt: int,
        *,
        stream: str,
        redact: Callable[[str], str],
        fencing_token: int | None,
        quiet_s: float = 0.0,
    ) -> None:
        self.execution_id = execution_id
        self.attempt = attempt
        self.stream = stream
        self.redact = redact
        self.fencing_token = fencing_token
        self.stored = 0
        self._partial = b""
        self._dead = False  # refused once (Redis away, log sealed, stale): no more tries
        self._hold_until = time.monotonic() + quiet_s
        self._held: list[str] = []

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
        self._held = []  # closed within quiet_s: not a log

    def _send(self, raw: list[bytes]) -> None:
        lines = [self.redact(r.decode("utf-8", "replace").rstrip("\r")) for r in raw]
        if self._hold_until and time.monotonic() < self._hold_until:
            self._held += lines
            return
        self._hold_until = 0.0
        lines, self._held = self._held + lines, []
        if lines and not self._dead:
            stored = append(
                self.execution_id,
                self.attempt,
                self.stream,
                lines,
                fencing_token=self.fencing_token,
            )
            self._dead = stored <= 0
            self.stored += max(0, stored)
