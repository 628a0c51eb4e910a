"""What every command handler gets: the client (built on first use), the output
mode and the streams — so handlers run in-process in tests, output captured."""

from __future__ import annotations

import json as _json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from scheduler_client import config
from scheduler_client.client import Client, RetryNotice

# The exit codes (CI scripts test them): 0 ok / no changes, 1 an API or network
# error, 2 usage or invalid input (API 400 and 422 too), 3 `apply --exit-code`
# found changes.
EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_CHANGES = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input the CLI itself detected: printed as `error: ...`, exit code 2."""


Handler = Callable[[Any, "Context"], int]


@dataclass
class Context:
    out: IO[str]
    err: IO[str]
    json: bool = False
    url: str | None = None
    token: str | None = None
    retries: int | None = None
    retry_timeout: float | None = None
    _client: Client | None = field(default=None, repr=False)

    @property
    def client(self) -> Client:
        """From --url/--token, else SCHEDCTL_URL/SCHEDCTL_TOKEN, else the config file;
        the retry limits from --retries/--retry-timeout, else the environment."""
        if self._client is None:
            try:
                settings = config.load(self.url, self.token)
                retry = config.retry_options(self.retries, self.retry_timeout)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if not settings.url or not settings.token:
                raise UsageError(
                    "no server configured: run `schedctl login --url URL --token TOKEN`, "
                    "set SCHEDCTL_URL and SCHEDCTL_TOKEN, or pass --url and --token"
                )
            self._client = Client(settings.url, settings.token, on_retry=self.note_retry, **retry)
        return self._client

    def note_retry(self, notice: RetryNotice) -> None:
        """One line on stderr per retry, so a command waiting out a fail-over says why."""
        answer = f"HTTP {notice.status}" if notice.status else "no answer"
        self.warn(
            f"{notice.method} {notice.path}: {answer} ({notice.message}); retrying in "
            f"{notice.delay_s:.1f} s (attempt {notice.attempt + 1} of {notice.max_attempts})"
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # ------------------------------------------------------------------ output

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def warn(self, text: str) -> None:
        self.err.write(text + "\n")

    def emit_json(self, value: Any) -> None:
        self.out.write(_json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")

    def table(self, rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
        """Aligned columns under the headers (the same rows --json prints as objects)."""
        self.out.write(render_table(rows, headers))


def counted(n: int, noun: str) -> str:
    """`1 definition`, `2 definitions`: a count with its noun in the right number
    (the CLI's nouns all take a plain -s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return _json.dumps(value, separators=(",", ":"))
    return str(value).replace("\n", " ")


def render_table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    text_rows = [[cell(v) for v in row] for row in rows]
    head = list(headers)
    widths = [len(h) for h in head]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = [head, *text_rows]
    return "".join(
        "  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip() + "\n"
        for line in lines
    )
