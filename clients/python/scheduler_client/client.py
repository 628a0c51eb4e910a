"""The synchronous client: one httpx connection pool, the API's error envelope
as typed exceptions, keyset paging as iterators, and retries that are safe.

Retries: a 429 or 503 means the server did nothing, so every method is retried,
after the Retry-After the server sent (seconds or an HTTP date) or else an
exponential, jittered, capped backoff. A connection error may have reached the
server, so only idempotent requests are retried then: GET, PUT, DELETE, and the
POSTs the API makes idempotent (a job with an idempotency_key, apply), which
callers mark with `idempotent=True`. The backoff math is the platform's own
(scheduler_client.timing.retry), not a second copy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from scheduler_client import config
from scheduler_client.errors import ApiError, TransportError, from_response
from scheduler_client.timing import retry as backoff

__all__ = ["Client"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
RETRY_STATUSES = frozenset({429, 503})
# The client's backoff policy in the platform's retry-policy shape.
BACKOFF_POLICY = {"max_attempts": 0, "backoff": "exponential", "initial_s": 0.5, "max_s": 8.0}
# A Retry-After longer than this is not waited out: the error is raised at once,
# carrying retry_after, so a CLI does not hang for an hour.
MAX_RETRY_AFTER_S = 60.0
USER_AGENT = "scheduler-client/0.1"


def _quote(value: str) -> str:
    return quote(str(value), safe="")


class Client:
    """A tenant's view of the API, authenticated by a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 4,
        transport: httpx.BaseTransport | None = None,
        max_retry_after: float = MAX_RETRY_AFTER_S,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not token:
            raise ValueError("token is required")
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> Client:
        """SCHEDCTL_URL / SCHEDCTL_TOKEN, else the file `schedctl login` wrote."""
        settings = config.load()
        if not settings.url or not settings.token:
            raise ValueError(
                "no server configured: set SCHEDCTL_URL and SCHEDCTL_TOKEN, "
                f"or run `schedctl login` (writes {config.config_path()})"
            )
        return cls(settings.url, settings.token, **kwargs)

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """Send one request (with retries); the parsed JSON answer, None when empty.

        Raises the ApiError subclass for the status (errors.BY_STATUS), or
        TransportError when no answer came.
        """
        response = self.send(
            method, path, json=json, params=params, headers=headers, idempotent=idempotent
        )
        if not response.content:
            return None
        return response.json()

    def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
    ) -> httpx.Response:
        """As request(), but the successful httpx.Response itself (headers, status)."""
        method = method.upper()
        safe = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        query = {k: v for k, v in (params or {}).items() if v is not None}
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                response = self._http.request(
                    method, path, json=json, params=query, headers=dict(headers or {})
                )
            except httpx.TransportError as exc:
                if not safe or attempt > self.max_retries:
                    raise TransportError(
                        0, "network_error", f"{method} {path}: {exc or type(exc).__name__}"
                    ) from exc
            else:
                if response.is_success:
                    return response
                retry_after = backoff.parse_retry_after(response.headers.get("Retry-After"))
                if (
                    response.status_code not in RETRY_STATUSES
                    or attempt > self.max_retries
                    or (retry_after is not None and retry_after > self.max_retry_after)
                ):
                    raise self._error(response, retry_after)
            time.sleep(backoff.backoff_s(BACKOFF_POLICY, attempt, retry_after_s=retry_after))

    @staticmethod
    def _error(response: httpx.Response, retry_after: float | None) -> ApiError:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text[:500] or None
        return from_response(response.status_code, body, retry_after=retry_after)

    def paginate(
        self, path: str, params: Mapping[str, Any] | None = None, *, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every item of a keyset-paged list ({"results", "next_cursor"}), page by page."""
        query = dict(params or {})
        if limit is not None:
            query["limit"] = limit
        while True:
            page = self.request("GET", path, params=query)
            yield from page["results"]
            cursor = page.get("next_cursor")
            if not cursor:
                return
            query["cursor"] = cursor

    # ------------------------------------------------------------------ schedules as code

    def apply_schedules(
        self, definitions: list[dict[str, Any]], *, prune: bool = False, dry_run: bool = False
    ) -> dict[str, Any]:
        """POST /v1/schedules:apply — all or nothing; the summary and per-schedule changes."""
        body = {"schedules": definitions, "prune": prune, "dry_run": dry_run}
        # Keyed by name and all-or-nothing: sending it twice converges to the same state.
        result: dict[str, Any] = self.request(
            "POST", "/v1/schedules:apply", json=body, idempotent=True
        )
        return result

    def export_schedules(self) -> list[dict[str, Any]]:
        """GET /v1/schedules:export — the tenant's definitions, as apply takes them."""
        result = self.request("GET", "/v1/schedules:export")
        schedules: list[dict[str, Any]] = result["schedules"]
        return schedules
