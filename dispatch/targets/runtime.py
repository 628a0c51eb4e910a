"""What every target kind's `run(ctx) -> Outcome` shares: the context of one
claimed attempt, its outcome, bounded output capture and secret redaction."""

from __future__ import annotations

import base64
import binascii
import contextlib
import html
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus

from dispatch.identity.keys import KeyUnavailable
from dispatch.logs import LineWriter

REDACTED = "[redacted]"
EVENT_MESSAGE_MAX = 1000
# Below this many bytes a secret is redacted verbatim only: its derived forms
# (a base64 fragment of two or three characters) would redact ordinary text.
MIN_DERIVED_BYTES = 4
MIN_BASE64_CORE = 6


class SecretError(Exception):
    """A secret reference could not be resolved; `retryable` says whether trying later may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class Aborted(Exception):
    """The attempt was stopped from outside: lease lost (fenced out / cancelled) or deadline."""


def result_label(status_code: int | None, exit_code: int | None) -> str:
    """An attempt's result as the timeline and the explainer name it: "HTTP 503",
    "exit 2", or "" when it has neither."""
    if status_code is not None:
        return f"HTTP {status_code}"
    if exit_code is not None:
        return f"exit {exit_code}"
    return ""


def attempt_label(attempt: int, base: int, *, of: int | None = None) -> str:
    """An attempt as the timeline names it: the row's attempt number (X-Attempt), and
    in a re-run's chain (`base`: the attempt it continued from) which try of that chain
    it is — the retry policy counts those, `of` of them at most. worker.sql's claim
    writes the same words."""
    out_of = f" of {of}" if of is not None else ""
    if base <= 0:
        return f"attempt {attempt}{out_of}"
    return f"attempt {attempt} (re-run, try {attempt - base}{out_of})"


@dataclass
class Outcome:
    """How one attempt ended. The runner turns it into a state change under the fencing token."""

    ok: bool
    retryable: bool = False
    # A hand-off accepted (`"completion": "callback"`: HTTP 202, or the message
    # published): the attempt stays running until the tenant's service calls back.
    awaiting: bool = False
    # The run's result as the target reported it (a completion callback): stored as
    # the execution's `output`. None: nothing reported.
    output: Any = None
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
    # 1 + the occurrence's re-runs: a duplicate delivery repeats (execution_id, run);
    # a deliberate re-run comes with the next run number.
    run: int = 1
    schedule_id: str = ""
    # Mints the attempt's workload identity token for an audience (dispatch/identity):
    # set by the worker; raises KeyUnavailable when no key can sign.
    mint_identity: Callable[[RunContext, str], str] | None = None
    # With `"completion": "callback"`: where and with what the tenant's service calls
    # back (dispatch/completion.py). The token is redacted like a secret.
    completion_url: str | None = None
    completion_token: str | None = None
    started: float = field(default_factory=time.monotonic)
    abort_reason: str = ""
    secret_values: list[str] = field(default_factory=list)
    _abort: threading.Event = field(default_factory=threading.Event)
    _callbacks: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _live_logs: list[LineWriter] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.completion_token:
            self.secret_values.append(self.completion_token)

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
        return _redactor(tuple(self.secret_values)).text(text)

    def redact_bytes(self, data: bytes) -> bytes:
        return _redactor(tuple(self.secret_values)).bytes(data)

    def capture(self, *, keep_tail: bool = False) -> Capture:
        # Slack for the longest form a secret may take (URL- or JSON-escaped
        # text is several times longer than the secret), so it is whole at a cut.
        longest = _redactor(tuple(self.secret_values)).longest
        return Capture(self.excerpt_bytes, keep_tail=keep_tail, slack=max(256, longest + 16))

    def live_log(self, *, quiet_s: float = 0.0) -> LineWriter:
        """The attempt's live log (dispatch/logs.py) for what the target prints or
        answers, line by line as it comes, redacted, under the attempt's token."""
        writer = LineWriter(
            self.execution_id,
            self.attempt,
            stream="output",
            redact=self.redact,
            fencing_token=self.fencing_token,
            quiet_s=quiet_s,
        )
        self._live_logs.append(writer)
        return writer

    @property
    def live_logged(self) -> bool:
        """Whether the attempt's live log took a line from this worker."""
        return any(w.stored for w in self._live_logs)

    # --- workload identity ---

    def identity_token(self) -> str | None:
        """The attempt's identity token when the target asks for one (`target.auth`),
        else None. Redacted like a secret from everything stored: it is a credential
        for as long as it lives."""
        auth = self.target.get("auth")
        if not auth:
            return None
        if self.mint_identity is None:
            raise KeyUnavailable("this worker has no workload identity signer")
        token = self.mint_identity(self, str(auth["audience"]))
        if token not in self.secret_values:
            self.secret_values.append(token)
        return token

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


def secret_forms(value: str) -> tuple[set[str], set[str]]:
    """The spellings of a secret a target may echo: (case-insensitive, case-sensitive).

    Case-insensitive: the value itself (so upper- or lower-cased echoes too), JSON-,
    URL-, HTML- and hex-encoded. Case-sensitive: base64 (standard and URL-safe, with
    and without padding), plus the part of its base64 that does not depend on what
    surrounds it, at each of the three byte alignments (a secret inside a larger
    base64 blob, e.g. `Basic base64(user:secret)`).
    """
    raw = value.encode("utf-8", "surrogatepass")
    loose = {value, value.upper(), value.lower(), json.dumps(value)[1:-1]}
    exact: set[str] = set()
    if len(raw) >= MIN_DERIVED_BYTES:
        loose |= {
            json.dumps(value, ensure_ascii=False)[1:-1],
            quote(raw, safe=""),
            quote(raw),
            quote_plus(raw),
            html.escape(value),
            binascii.hexlify(raw).decode(),
        }
        for enc in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
            exact |= {enc, enc.rstrip("=")}
        for shift in range(3):
            enc = base64.b64encode(b"\0" * shift + raw).decode()
            # Character i covers bits 6i..6i+5; keep those inside the secret's bits.
            start = -(-8 * shift // 6)
            end = (8 * (shift + len(raw))) // 6
            core = enc[start:end]
            if len(core) >= MIN_BASE64_CORE:
                exact |= {core, core.replace("+", "-").replace("/", "_")}
    return {f for f in loose if f}, {f for f in exact if f}


class _Redactor:
    def __init__(self, values: tuple[str, ...]) -> None:
        loose: set[str] = set()
        exact: set[str] = set()
        for value in values:
            more_loose, more_exact = secret_forms(value)
            loose |= more_loose
            exact |= more_exact
        self.longest = max(
            (len(f.encode("utf-8", "surrogatepass")) for f in loose | exact), default=0
        )
        self._text = [_alternation(exact, 0), _alternation(loose, re.IGNORECASE)]
        self._bytes = [_alternation_bytes(exact, 0), _alternation_bytes(loose, re.IGNORECASE)]
        # Escapers disagree on which punctuation to escape (PHP's json_encode writes
        # `\/`, Go's html/template `&#43;`, OWASP encoders `&#x2F;`, each for some
        # characters only): one pattern per secret lets every punctuation character
        # appear in any of its spellings, mixed.
        mixed = "|".join(
            _mixed_escapes(v)
            for v in sorted(values, key=len, reverse=True)
            if len(v.encode("utf-8", "surrogatepass")) >= MIN_DERIVED_BYTES
        )
        if mixed:
            self._text.append(re.compile(mixed, re.IGNORECASE))
            self._bytes.append(re.compile(mixed.encode("utf-8", "surrogatepass"), re.IGNORECASE))
            # An entity spells one character in up to 10 bytes (`&#x0002F;`).
            self.longest = max(self.longest, 10 * max(len(v) for v in values))

    def text(self, text: str) -> str:
        for pattern in self._text:
            if pattern is not None:
                text = pattern.sub(REDACTED, text)
        return text

    def bytes(self, data: bytes) -> bytes:
        for pattern in self._bytes:
            if pattern is not None:
                data = pattern.sub(REDACTED.encode(), data)
        return data


def _mixed_escapes(value: str) -> str:
    """A regex matching `value` with any of its punctuation escaped in any common way."""
    parts = []
    for ch in value:
        if ch.isalnum() or ord(ch) > 0xFFFF:
            parts.append(re.escape(ch))
            continue
        n = ord(ch)
        spellings = [
            re.escape(ch),
            re.escape("\\" + ch),  # JSON's optional escape of any punctuation (`\/`)
            f"\\\\u0*{n:x}",  # \u002f
            f"%{n:02x}" if n < 0x80 else "",  # URL
            f"&#0*{n};",  # &#43;
            f"&#x0*{n:x};",  # &#x2F;
            re.escape(html.escape(ch)) if html.escape(ch) != ch else "",  # &amp; &quot; …
            re.escape("+") if ch == " " else "",  # form encoding
        ]
        parts.append("(?:" + "|".join(p for p in spellings if p) + ")")
    return "".join(parts)


def _alternation(forms: set[str], flags: int) -> re.Pattern[str] | None:
    if not forms:
        return None
    # Longest first: a form that contains another is replaced whole.
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)), flags)


def _alternation_bytes(forms: set[str], flags: int) -> re.Pattern[bytes] | None:
    encoded = {f.encode("utf-8", "surrogatepass") for f in forms}
    if not encoded:
        return None
    ordered = sorted(encoded, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(f) for f in ordered), flags)


@lru_cache(maxsize=64)
def _redactor(values: tuple[str, ...]) -> _Redactor:
    return _Redactor(values)


def describe_exception(exc: BaseException) -> str:
    """`Type: message` for an error record, with no data the exception quotes.

    A UnicodeError's text names the character it choked on and its position —
    when the string was a secret, one character of it (and its length) would be
    stored and logged.
    """
    if isinstance(exc, UnicodeError):
        encoding = getattr(exc, "encoding", "") or "text"
        reason = getattr(exc, "reason", "") or "invalid character"
        return f"{type(exc).__name__}: the {encoding} codec could not convert a value ({reason})"
    return f"{type(exc).__name__}: {exc}"


def _decode(data: bytes) -> str:
    # PostgreSQL text cannot hold NUL; a hostile target sending them must not
    # make the result unrecordable.
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def _cut_note(omitted: int) -> str:
    return f"\n[… {omitted} bytes not stored …]\n" if omitted > 0 else ""


def clip(text: str, limit: int = EVENT_MESSAGE_MAX) -> str:
    text = text.replace("\x00", "\ufffd")
    return text if len(text) <= limit else text[: limit - 1] + "…"
