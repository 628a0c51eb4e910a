"""What every target kind's `run(ctx) -> Outcome` shares: the context of one
claimed attempt, its outcome, bounded output capture and secret redaction."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

REDACTED = "[redacted]"
EVENT_MESSAGE_MAX = 1000


class SecretError(Exception):
    """A secret reference could not be resolved; `retryable` says whether trying later may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class Aborted(Exception):
    """The attempt was stopped from outside: lease lost (fenced out / cancelled) or deadline."""


@dataclass
class Outcome:
    """How one attempt ended. The runner turns it into a state change under the fencing token."""

    ok: bool
    retryable: bool = False
    status_code: int | None = None
    exit_code: int | None = None
    excerpt: str = ""
    error: str = ""
    reason_code: str = ""
    retry_after_s: float | None = None
    latency_ms: int = 0
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def success(cls, **kwargs: Any) -> Outcome:
        return cls(ok=True, **kwargs)

    @classmethod
    def failure(cls, error: str, *, retryable: bool, reason_code: str, **kwargs: Any) -> Outcome:
        return cls(ok=False, retryable=retryable, error=error, reason_code=reason_code, **kwargs)


@dataclass
class RunContext:
    """One claimed attempt: the ids every target passes on, the deadline, secrets and abort."""

    execution_id: str
    scheduled_for: datetime
    attempt: int
    fencing_token: int
    tenant_id: int
    tenant_slug: str
    signing_key: str
    egress_allow: list[str]
    target: dict[str, Any]
    timeout_s: float
    excerpt_bytes: int
    resolve_secret: Callable[[str], str]
    started: float = field(default_factory=time.monotonic)
    abort_reason: str = ""
    secret_values: list[str] = field(default_factory=list)
    _abort: threading.Event = field(default_factory=threading.Event)
    _callbacks: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    # --- secrets ---

    def secret(self, ref: str) -> str:
        """The value behind a secret reference; remembered so every output is redacted of it."""
        value = self.resolve_secret(ref)
        if value and value not in self.secret_values:
            self.secret_values.append(value)
        return value

    def redact(self, text: str) -> str:
        for value in self.secret_values:
            for form in {value, json.dumps(value)[1:-1]}:
                if form:
                    text = text.replace(form, REDACTED)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        for value in self.secret_values:
            for form in {value, json.dumps(value)[1:-1]}:
                if form:
                    data = data.replace(form.encode(), REDACTED.encode())
        return data

    def capture(self, *, keep_tail: bool = False) -> Capture:
        longest = max((len(v.encode()) for v in self.secret_values), default=0)
        return Capture(self.excerpt_bytes, keep_tail=keep_tail, slack=max(256, longest + 16))

    # --- abort ---

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def on_abort(self, callback: Callable[[], None]) -> None:
        """Run `callback` (close a socket, kill a process group) when the attempt is aborted."""
        with self._lock:
            if not self._abort.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._abort.is_set():
                return
            self.abort_reason = reason
            self._abort.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            # Best effort: the socket or process may already be gone.
            with contextlib.suppress(Exception):
                callback()

    def wait_abort(self, timeout: float) -> bool:
        return self._abort.wait(timeout)


class Capture:
    """Keeps the first (and optionally the last) `limit` bytes of a stream, discarding the rest.

    Memory stays bounded whatever the stream's size. `slack` extra bytes are
    kept at each cut so a secret straddling a cut is still whole when redacted.
    """

    def __init__(self, limit: int, *, keep_tail: bool = False, slack: int = 256) -> None:
        self.limit = max(0, limit)
        self.head_limit = self.limit // 2 if keep_tail else self.limit
        self.tail_limit = self.limit - self.head_limit if keep_tail else 0
        self.slack = slack
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit + self.slack - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if not self.tail_limit:
            self.dropped += len(chunk)
            return
        self.tail += chunk
        excess = len(self.tail) - (self.tail_limit + self.slack)
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self, redact: Callable[[bytes], bytes]) -> str:
        if self.dropped == 0:
            whole = redact(bytes(self.head + self.tail))
            if len(whole) <= self.limit:
                return _decode(whole)
            if not self.tail_limit:
                return _decode(whole[: self.limit]) + _cut_note(self.total - self.limit)
            head, tail = whole[: self.head_limit], whole[-self.tail_limit :]
        else:
            head = redact(bytes(self.head))[: self.head_limit]
            tail = redact(bytes(self.tail))[-self.tail_limit :] if self.tail_limit else b""
        omitted = self.total - len(head) - len(tail)
        if not self.tail_limit:
            return _decode(head) + _cut_note(omitted)
        return _decode(head) + _cut_note(omitted) + _decode(tail)


def _decode(data: bytes) -> str:
    # PostgreSQL text cannot hold NUL; a hostile target sending them must not
    # make the result unrecordable.
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def _cut_note(omitted: int) -> str:
    return f"\n[… {omitted} bytes not stored …]\n" if omitted > 0 else ""


def clip(text: str, limit: int = EVENT_MESSAGE_MAX) -> str:
    text = text.replace("\x00", "\ufffd")
    return text if len(text) <= limit else text[: limit - 1] + "…"
