"""The tenant's side of an async completion (`"completion": "callback"` targets).

The platform hands an attempt off with two values: on an HTTP request the headers
`X-Completion-URL` and `X-Completion-Token`, on a queue message the headers
`completion_url` and `completion_token`. The service answers the request `202
Accepted` (a queue consumer just takes the message), does the work, and calls back:

    job = Completion.from_headers(request.headers)
    job.heartbeat(progress=40, message="page 4 of 10")   # at least every heartbeat_s
    job.succeed({"rows": 1234})                          # or job.fail("disk full")

A call for an attempt that is no longer current (cancelled, timed out, re-run, given
to another attempt after a missed heartbeat) raises Conflict (409): stop the work,
its result would not be recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from scheduler_client.errors import ApiError, TransportError, from_response

HEADERS = (("x-completion-url", "x-completion-token"), ("completion_url", "completion_token"))


class Completion:
    """The callbacks of one handed-off attempt."""

    def __init__(
        self, url: str, token: str, *, timeout: float = 10.0, trace: Mapping[str, str] | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        # The attempt's W3C trace context, sent with every call: the callbacks join
        # the execution's trace on the platform's side.
        self._trace = dict(trace or {})

    @classmethod
    def from_headers(cls, headers: Mapping[str, Any], *, timeout: float = 10.0) -> Completion:
        """From the HTTP request's headers or the queue message's (any letter case)."""
        lowered = {str(k).lower(): v for k, v in headers.items()}
        trace = {k: str(lowered[k]) for k in ("traceparent", "tracestate") if lowered.get(k)}
        for url_key, token_key in HEADERS:
            if lowered.get(url_key) and lowered.get(token_key):
                return cls(
                    str(lowered[url_key]), str(lowered[token_key]), timeout=timeout, trace=trace
                )
        raise ValueError(
            "no completion capability in these headers (X-Completion-URL and "
            "X-Completion-Token): is the target's completion set to callback?"
        )

    def heartbeat(self, *, progress: float | None = None, message: str = "") -> dict[str, Any]:
        """Still working: the platform waits heartbeat_s more (never past the timeout).
        The answer's `lease_expires_at` is when the next call is due at the latest."""
        body: dict[str, Any] = {}
        if progress is not None:
            body["progress"] = progress
        if message:
            body["message"] = message
        return self._post(":heartbeat", body)

    def succeed(self, output: Any = None, *, message: str = "") -> dict[str, Any]:
        """Done: the attempt succeeded, with `output` (any JSON up to 16 KB) as its result."""
        body: dict[str, Any] = {}
        if output is not None:
            body["output"] = output
        if message:
            body["message"] = message
        return self._post(":succeed", body)

    def fail(self, error: str, *, retryable: bool = True, output: Any = None) -> dict[str, Any]:
        """Failed: retried by the schedule's policy, or dead at once when not `retryable`."""
        body: dict[str, Any] = {"error": error, "retryable": retryable}
        if output is not None:
            body["output"] = output
        return self._post(":fail", body)

    def _post(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = httpx.post(
                self.url + action,
                json=body,
                headers={"Authorization": f"Bearer {self._token}", **self._trace},
                timeout=self._timeout,
            )
        except httpx.TransportError as exc:
            raise TransportError(0, "transport", f"{type(exc).__name__}: {exc}") from exc
        if response.is_success:
            answer: dict[str, Any] = response.json()
            return answer
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = response.text[:500] or None
        error: ApiError = from_response(response.status_code, parsed)
        raise error
