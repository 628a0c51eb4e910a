"""The synchronous client: one httpx connection pool, the API's error envelope
as typed exceptions, keyset paging as iterators, and retries that are safe.

Retries, with the Retry-After the server sent (seconds or an HTTP date) as the
least wait, else an exponential, jittered, capped backoff; at most `max_retries`
more attempts, and none that would start later than `retry_timeout` seconds after
the first:

* 429: every request. The throttle refuses before the view runs: nothing was done.
* 503 (the database is away: a fail-over, a switchover, a restart) and connection
  errors: idempotent requests only — GET, HEAD, OPTIONS, PUT, DELETE, and the
  requests callers mark `idempotent=True`: a POST carrying an idempotency key
  (/v1/jobs with `idempotency_key`, /v1/jobs:batch), a PATCH conditional on its
  If-Match version, and the POSTs whose repeat is the same state (apply, pause,
  resume, cancel, snooze, the dry runs). The server may have lost its database
  while committing, so a 503 does not prove that nothing was done: a POST without
  a key (create a schedule, trigger, rerun, backfill) is raised at once, its
  message saying so.

When the retries run out, the last error is raised, its message saying how many
attempts were made over how long. The backoff math is the platform's own
(scheduler_client.timing.retry), not a second copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from scheduler_client import config
from scheduler_client.errors import ApiError, TransportError, from_response
from scheduler_client.models import (
    AlertChannel,
    Backfill,
    Calendar,
    CalendarDate,
    Execution,
    Explanation,
    Job,
    MaintenanceWindow,
    Operation,
    Schedule,
)
from scheduler_client.timing import retry as backoff

__all__ = ["Client", "RetryNotice"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
THROTTLED, UNAVAILABLE = 429, 503
# The client's backoff policy in the platform's retry-policy shape.
BACKOFF_POLICY = {"max_attempts": 0, "backoff": "exponential", "initial_s": 0.5, "max_s": 8.0}
# Enough to ride out a planned switchover of PostgreSQL (seconds) and most fail-overs.
DEFAULT_MAX_RETRIES = config.DEFAULT_RETRIES
DEFAULT_RETRY_TIMEOUT_S = config.DEFAULT_RETRY_TIMEOUT_S
# A Retry-After longer than this is not waited out: the error is raised at once,
# carrying retry_after, so a CLI does not hang for an hour.
MAX_RETRY_AFTER_S = 60.0
USER_AGENT = "scheduler-client/0.1"
# A pooled connection idle this long is not used again. Servers close idle keep-alive
# connections (gunicorn after 2 s), and a request sent on one just as the server closes
# it is reset unanswered: a POST then fails for nothing, since it cannot be sent again.
# Waiting out a Retry-After (2 s for a 503) is exactly such an idle gap.
KEEPALIVE_EXPIRY_S = 1.0
NOT_RETRIED = (
    "not sent again: {method} {path} is not idempotent and may have taken effect; "
    "look before you send it again"
)


@dataclass(frozen=True)
class RetryNotice:
    """What `on_retry` is told before the client waits and sends a request again."""

    method: str
    path: str
    attempt: int  # the attempt that failed, from 1
    max_attempts: int
    status: int  # 0: no answer (a connection error)
    message: str
    delay_s: float


def _quote(value: str) -> str:
    return quote(str(value), safe="")


def _flag(value: bool | None) -> str | None:
    return None if value is None else ("true" if value else "false")


def api_base(url: str) -> str:
    """The platform's address as the client speaks to it, given with or without the
    API's `/v1` and a trailing slash (`make run` prints the API as `.../v1/`)."""
    base = url.strip().rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class Client:
    """A tenant's view of the API, authenticated by a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        max_retry_after: float = MAX_RETRY_AFTER_S,
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> None:
        """`max_retries`: attempts after the first; `retry_timeout`: seconds after the
        first attempt past which no retry starts; `on_retry`: told of each retry
        before its wait (schedctl prints it)."""
        if not base_url:
            raise ValueError("base_url is required")
        if not token:
            raise ValueError("token is required")
        if max_retries < 0 or retry_timeout < 0:
            raise ValueError("max_retries and retry_timeout must not be negative")
        self.base_url = api_base(base_url)
        self.max_retries = max_retries
        self.retry_timeout = retry_timeout
        self.max_retry_after = max_retry_after
        self.on_retry = on_retry
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,  # a transport of the caller's keeps its own pool settings
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> Client:
        """SCHEDCTL_URL / SCHEDCTL_TOKEN, else the file `schedctl login` wrote; the retry
        limits from SCHEDCTL_RETRIES / SCHEDCTL_RETRY_TIMEOUT when set."""
        settings = config.load()
        if not settings.url or not settings.token:
            raise ValueError(
                "no server configured: set SCHEDCTL_URL and SCHEDCTL_TOKEN, "
                f"or run `schedctl login` (writes {config.config_path()})"
            )
        return cls(settings.url, settings.token, **(config.retry_options() | kwargs))

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
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            cause: Exception | None = None
            try:
                response = self._http.request(
                    method, path, json=json, params=query, headers=dict(headers or {})
                )
            except httpx.TransportError as exc:
                cause = exc
                error: ApiError = TransportError(
                    0, "network_error", f"{method} {path}: {exc or type(exc).__name__}"
                )
                # It may have reached the server before the connection broke.
                retryable = safe
            else:
                if response.is_success:
                    return response
                retry_after = backoff.parse_retry_after(response.headers.get("Retry-After"))
                error = self._error(response, retry_after)
                status = response.status_code
                retryable = status == THROTTLED or (status == UNAVAILABLE and safe)
            if not retryable:
                if error.status in (0, UNAVAILABLE):
                    error.note = NOT_RETRIED.format(method=method, path=path)
                raise error from cause
            if retry_after is not None and retry_after > self.max_retry_after:
                raise error from cause
            delay = backoff.backoff_s(BACKOFF_POLICY, attempt, retry_after_s=retry_after)
            elapsed = time.monotonic() - started
            if attempt > self.max_retries or elapsed + delay > self.retry_timeout:
                error.attempts = attempt
                error.note = (
                    f"gave up after {attempt} attempt{'s' if attempt > 1 else ''} "
                    f"in {elapsed:.1f} s"
                )
                raise error from cause
            if self.on_retry is not None:
                self.on_retry(
                    RetryNotice(
                        method,
                        path,
                        attempt,
                        self.max_retries + 1,
                        error.status,
                        error.message,
                        delay,
                    )
                )
            time.sleep(delay)

    @staticmethod
    def _error(response: httpx.Response, retry_after: float | None) -> ApiError:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text[:500] or None
        return from_response(response.status_code, body, retry_after=retry_after)

    def paginate(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        limit: int | None = None,
        key: str = "results",
    ) -> Iterator[dict[str, Any]]:
        """Every item of a keyset-paged list ({key: [...], "next_cursor"}), page by page;
        a list the server answers whole (no next_cursor) is one page."""
        query = dict(params or {})
        if limit is not None:
            query["limit"] = limit
        while True:
            page = self.request("GET", path, params=query)
            yield from page[key]
            cursor = page.get("next_cursor")
            if not cursor:
                return
            query["cursor"] = cursor

    # ------------------------------------------------------------------ schedules

    def list_schedules(
        self,
        *,
        search: str | None = None,
        kind: str | None = None,
        paused: bool | None = None,
        page_size: int | None = None,
    ) -> Iterator[Schedule]:
        """Every schedule of the tenant (keyset-paged underneath), newest first."""
        params = {"search": search, "kind": kind, "paused": _flag(paused)}
        for item in self.paginate("/v1/schedules", params, limit=page_size):
            yield Schedule.from_json(item)

    def get_schedule(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(self.request("GET", f"/v1/schedules/{_quote(schedule_id)}"))

    def create_schedule(self, definition: Mapping[str, Any]) -> Schedule:
        """POST /v1/schedules (not retried after a 503 or a lost connection: it could
        create twice)."""
        return Schedule.from_json(self.request("POST", "/v1/schedules", json=dict(definition)))

    def update_schedule(
        self, schedule_id: str, changes: Mapping[str, Any], *, version: int
    ) -> Schedule:
        """PATCH with If-Match: a stale `version` is Conflict, nothing written."""
        return Schedule.from_json(
            self.request(
                "PATCH",
                f"/v1/schedules/{_quote(schedule_id)}",
                json=dict(changes),
                headers={"If-Match": f'"{int(version)}"'},
                # Conditional on the version: a repeat after a lost answer is a 409, never a
                # second edit, so it is safe to send again.
                idempotent=True,
            )
        )

    def delete_schedule(self, schedule_id: str) -> None:
        self.request("DELETE", f"/v1/schedules/{_quote(schedule_id)}")

    def pause_schedule(
        self, schedule_id: str, *, reason: str = "", until: str | None = None
    ) -> Schedule:
        body: dict[str, Any] = {"reason": reason}
        if until is not None:
            body["until"] = until
        return Schedule.from_json(
            self.request(
                "POST", f"/v1/schedules/{_quote(schedule_id)}:pause", json=body, idempotent=True
            )
        )

    def resume_schedule(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(
            self.request("POST", f"/v1/schedules/{_quote(schedule_id)}:resume", idempotent=True)
        )

    def trigger_schedule(self, schedule_id: str) -> Execution:
        """Run now (not retried after a 503 or a lost connection: it could run twice)."""
        return Execution.from_json(
            self.request("POST", f"/v1/schedules/{_quote(schedule_id)}:trigger")
        )

    def preview_schedule(
        self, schedule_id: str, *, count: int = 5, start: str | None = None
    ) -> dict[str, Any]:
        """The server's preview of a saved schedule (its own seed resolves H)."""
        result: dict[str, Any] = self.request(
            "GET",
            f"/v1/schedules/{_quote(schedule_id)}/preview",
            params={"count": count, "from": start},
        )
        return result

    def explain(self, schedule_id: str, at: str) -> Explanation:
        """Why the schedule did or did not run at `at` (an ISO 8601 instant)."""
        return Explanation.from_json(
            self.request("GET", f"/v1/schedules/{_quote(schedule_id)}/explain", params={"at": at})
        )

    def schedule_health(self, schedule_id: str) -> dict[str, Any]:
        """GET /v1/schedules/{id}/health: the same object as Schedule.health (last and next
        run, success rates and p50/p95 durations over 24 h / 7 d / 30 d, failures in a row)."""
        result: dict[str, Any] = self.request("GET", f"/v1/schedules/{_quote(schedule_id)}/health")
        return result

    def find_schedule(self, ref: str) -> Schedule:
        """A schedule by id, or else by its exact name (names are not unique: two is an error)."""
        try:
            return self.get_schedule(ref)
        except ApiError as exc:
            if exc.status != 404:
                raise
        matches = [s for s in self.list_schedules(search=ref) if s.name == ref]
        if len(matches) == 1:
            return self.get_schedule(matches[0].id)
        if not matches:
            raise from_response(
                404, {"error": {"code": "not_found", "message": f"no schedule {ref!r}"}}
            )
        ids = ", ".join(s.id for s in matches)
        raise from_response(
            409,
            {
                "error": {
                    "code": "ambiguous",
                    "message": f"{len(matches)} schedules are named {ref!r}: {ids}; use an id",
                }
            },
        )

    # ------------------------------------------------------------------ jobs and runs

    def create_job(self, definition: Mapping[str, Any]) -> Job:
        """POST /v1/jobs; with an idempotency_key a retry returns the same job (retried)."""
        body = dict(definition)
        return Job.from_json(
            self.request(
                "POST", "/v1/jobs", json=body, idempotent=bool(body.get("idempotency_key"))
            )
        )

    def create_jobs(self, jobs: list[Mapping[str, Any]]) -> dict[str, Any]:
        """POST /v1/jobs:batch: every item carries its idempotency_key, so it is retried."""
        result: dict[str, Any] = self.request(
            "POST", "/v1/jobs:batch", json={"jobs": [dict(j) for j in jobs]}, idempotent=True
        )
        return result

    def list_jobs(
        self, *, search: str | None = None, page_size: int | None = None
    ) -> Iterator[Job]:
        for item in self.paginate("/v1/jobs", {"search": search}, limit=page_size):
            yield Job.from_json(item)

    def get_job(self, job_id: str) -> Job:
        return Job.from_json(self.request("GET", f"/v1/jobs/{_quote(job_id)}"))

    def cancel_job(self, job_id: str) -> Job:
        return Job.from_json(self.request("DELETE", f"/v1/jobs/{_quote(job_id)}"))

    def list_executions(
        self,
        *,
        schedule_id: str | None = None,
        state: str | list[str] | None = None,
        trigger: str | None = None,
        since: str | None = None,
        until: str | None = None,
        error: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Execution]:
        """The runs, newest first; `state` is one state or several (e.g. ["failed", "dead"])."""
        params = {
            "schedule_id": schedule_id,
            "state": ",".join(state) if isinstance(state, list) else state,
            "trigger": trigger,
            "from": since,
            "to": until,
            "error": error,
        }
        for item in self.paginate("/v1/executions", params, limit=page_size):
            yield Execution.from_json(item)

    def get_execution(self, execution_id: str) -> Execution:
        return Execution.from_json(self.request("GET", f"/v1/executions/{_quote(execution_id)}"))

    def execution_logs(
        self,
        execution_id: str,
        *,
        attempt: int | None = None,
        after: str | None = None,
        wait: int = 0,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """One page of an attempt's live log: {"lines", "next_cursor", "live", ...}; with
        `wait` (s, at most 20) the server answers as soon as a line comes."""
        params: dict[str, Any] = {}
        for name, value in (("after", after), ("limit", limit)):
            if value is not None:
                params[name] = value
        if wait:
            params["wait"] = wait
        path = f"/v1/executions/{_quote(execution_id)}"
        path += f"/attempts/{int(attempt)}/log" if attempt is not None else "/log"
        page: dict[str, Any] = self.request("GET", path, params=params)
        return page

    def follow_logs(
        self, execution_id: str, *, attempt: int | None = None, follow: bool = True
    ) -> Iterator[dict[str, Any]]:
        """Every line of the attempt's live log, oldest first; with `follow`, the lines
        still to come too, until the attempt ends."""
        after: str | None = None
        while True:
            page = self.execution_logs(
                execution_id, attempt=attempt, after=after, wait=20 if follow else 0
            )
            attempt = page["attempt"]
            yield from page["lines"]
            after = page["next_cursor"]
            if not page["lines"] and (not follow or not page["live"]):
                return

    def cancel_execution(self, execution_id: str, *, reason: str = "") -> Execution:
        return Execution.from_json(
            self.request(
                "POST",
                f"/v1/executions/{_quote(execution_id)}:cancel",
                json={"reason": reason} if reason else None,
                idempotent=True,  # cancelling twice is 200, unchanged
            )
        )

    def rerun_execution(
        self, execution_id: str, *, target: Mapping[str, Any] | None = None
    ) -> Execution:
        """Re-run a final execution as its next attempt (202); `target` replaces the
        schedule's for this run only. Not retried after a 503 or a lost connection: it
        could run twice."""
        return Execution.from_json(
            self.request(
                "POST",
                f"/v1/executions/{_quote(execution_id)}:rerun",
                json={"target": dict(target)} if target is not None else None,
            )
        )

    # ------------------------------------------------------------------ backfills

    @staticmethod
    def _backfill_body(
        start: str,
        end: str,
        *,
        reprocess: str | None,
        max_concurrent: int | None,
        order: str | None,
        skip_paused: bool | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        # Left out, an option takes the server's default (reprocess none, 1, oldest, false).
        options = {
            "reprocess": reprocess,
            "max_concurrent": max_concurrent,
            "order": order,
            "skip_paused": skip_paused,
        }
        body = {"from": start, "to": end, "dry_run": dry_run}
        return body | {k: v for k, v in options.items() if v is not None}

    def plan_backfill(
        self,
        schedule_id: str,
        start: str,
        end: str,
        *,
        reprocess: str | None = None,
        max_concurrent: int | None = None,
        order: str | None = None,
        skip_paused: bool | None = None,
    ) -> dict[str, Any]:
        """The dry run of backfill_schedule: the plan, nothing written —
        {"schedule_id", "timezone", "total", "counts": {action: n},
        "occurrences": [{"scheduled_for", "local", "action", "execution_id"}]}."""
        body = self._backfill_body(
            start,
            end,
            reprocess=reprocess,
            max_concurrent=max_concurrent,
            order=order,
            skip_paused=skip_paused,
            dry_run=True,
        )
        result: dict[str, Any] = self.request(
            "POST", f"/v1/schedules/{_quote(schedule_id)}:backfill", json=body, idempotent=True
        )
        return result

    def backfill_schedule(
        self,
        schedule_id: str,
        start: str,
        end: str,
        *,
        reprocess: str | None = None,
        max_concurrent: int | None = None,
        order: str | None = None,
        skip_paused: bool | None = None,
    ) -> Backfill:
        """Run the schedule's occurrences in [start, end) now (ISO 8601 instants, end not
        in the future). Not retried after a 503 or a lost connection: it could start twice."""
        body = self._backfill_body(
            start,
            end,
            reprocess=reprocess,
            max_concurrent=max_concurrent,
            order=order,
            skip_paused=skip_paused,
            dry_run=False,
        )
        return Backfill.from_json(
            self.request("POST", f"/v1/schedules/{_quote(schedule_id)}:backfill", json=body)
        )

    def list_backfills(
        self, schedule_id: str, *, page_size: int | None = None
    ) -> Iterator[Backfill]:
        """A schedule's backfills, newest first (without their plan's counts)."""
        path = f"/v1/schedules/{_quote(schedule_id)}/backfills"
        for item in self.paginate(path, limit=page_size):
            yield Backfill.from_json(item)

    def get_backfill(self, backfill_id: str) -> Backfill:
        return Backfill.from_json(self.request("GET", f"/v1/backfills/{_quote(backfill_id)}"))

    def cancel_backfill(self, backfill_id: str) -> Backfill:
        """Stop releasing its remaining occurrences; a finished backfill is Conflict."""
        return Backfill.from_json(
            self.request(
                "POST",
                f"/v1/backfills/{_quote(backfill_id)}:cancel",
                idempotent=True,  # cancelling twice is 200, unchanged
            )
        )

    # ------------------------------------------------------------------ bulk operations

    @staticmethod
    def _bulk_body(
        action: str,
        ids: list[str] | None,
        filters: Mapping[str, Any] | None,
        **extra: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"action": action}
        if ids is not None:
            body["ids"] = list(ids)
        if filters is not None:
            body["filter"] = dict(filters)  # the API's name; `filter` is a builtin
        return body | {k: v for k, v in extra.items() if v is not None}

    def bulk_schedules(
        self,
        action: str,
        *,
        ids: list[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        reason: str | None = None,
        until: str | None = None,
    ) -> Operation:
        """pause / resume / trigger / delete schedules by ids or by `filters` (the list
        filters: search, kind, paused). A small set is worked in the request (state
        "done", every item's result); a larger one comes back "running": follow it with
        get_operation. Not retried after a 503 or a lost connection (trigger could run twice)."""
        body = self._bulk_body(action, ids, filters, reason=reason, until=until)
        return Operation.from_json(self.request("POST", "/v1/schedules:bulk", json=body))

    def preview_bulk_schedules(
        self,
        action: str,
        *,
        ids: list[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        until: str | None = None,
    ) -> dict[str, Any]:
        """The dry run of bulk_schedules, nothing written: {"dry_run", "action", "total",
        "found", "not_found", "schedules", "text", "items", and for resume "run" /
        "skip"}."""
        body = self._bulk_body(action, ids, filters, until=until, dry_run=True)
        result: dict[str, Any] = self.request(
            "POST", "/v1/schedules:bulk", json=body, idempotent=True
        )
        return result

    def bulk_executions(
        self,
        action: str,
        *,
        ids: list[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> Operation:
        """cancel / rerun executions by ids or by filter (state, schedule_id, trigger as
        lists, from, to); as bulk_schedules, a large set answers a running operation."""
        body = self._bulk_body(action, ids, filters, reason=reason)
        return Operation.from_json(self.request("POST", "/v1/executions:bulk", json=body))

    def get_operation(self, operation_id: str, *, page_size: int | None = None) -> Operation:
        """The operation's progress and its first page of items (operation_items: all)."""
        return Operation.from_json(
            self.request(
                "GET", f"/v1/operations/{_quote(operation_id)}", params={"limit": page_size}
            )
        )

    def operation_items(
        self, operation_id: str, *, page_size: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every per-item result, by position: {"position", "id", "status", "detail"}."""
        path = f"/v1/operations/{_quote(operation_id)}"
        yield from self.paginate(path, limit=page_size, key="items")

    def cancel_operation(self, operation_id: str) -> Operation:
        """Items not worked yet become cancelled; a finished operation is Conflict."""
        return Operation.from_json(
            self.request(
                "POST",
                f"/v1/operations/{_quote(operation_id)}:cancel",
                idempotent=True,  # cancelling twice is 200, unchanged
            )
        )

    # ------------------------------------------------------------------ calendars

    def list_calendars(self) -> Iterator[Calendar]:
        """The tenant's calendars by name (the server answers them in one page: a tenant
        has at most 200; a next_cursor, should a server send one, is followed)."""
        for item in self.paginate("/v1/calendars"):
            yield Calendar.from_json(item)

    def get_calendar(self, calendar_id: str) -> Calendar:
        return Calendar.from_json(self.request("GET", f"/v1/calendars/{_quote(calendar_id)}"))

    def create_calendar(
        self, name: str, sources: list[Mapping[str, Any]], *, description: str | None = None
    ) -> Calendar:
        """POST /v1/calendars; a bad source is ValidationError naming it (sources[1].country)."""
        body: dict[str, Any] = {"name": name, "sources": [dict(s) for s in sources]}
        if description is not None:
            body["description"] = description
        return Calendar.from_json(self.request("POST", "/v1/calendars", json=body))

    def update_calendar(self, calendar_id: str, changes: Mapping[str, Any]) -> Calendar:
        """PATCH name / description / sources (the API takes no If-Match here). New
        sources re-plan every schedule listing the calendar."""
        return Calendar.from_json(
            self.request("PATCH", f"/v1/calendars/{_quote(calendar_id)}", json=dict(changes))
        )

    def delete_calendar(self, calendar_id: str) -> None:
        """Conflict while a schedule lists it (detail["schedules"]: their ids)."""
        self.request("DELETE", f"/v1/calendars/{_quote(calendar_id)}")

    def calendar_dates(
        self, calendar_id: str, *, start: str | None = None, end: str | None = None
    ) -> list[CalendarDate]:
        """The dates the calendar holds in [start, end] (YYYY-MM-DD, both included; the
        server's defaults: today (UTC) and a year later; at most 3 years)."""
        result = self.request(
            "GET",
            f"/v1/calendars/{_quote(calendar_id)}/dates",
            params={"from": start, "to": end},
        )
        return [CalendarDate.from_json(item) for item in result["results"]]

    # ------------------------------------------------------------------ alerts

    def list_alert_channels(self) -> Iterator[AlertChannel]:
        """The tenant's alert channels (admins only, reads too)."""
        for item in self.paginate("/v1/alert-channels"):
            yield AlertChannel.from_json(item)

    def get_alert_channel(self, channel_id: str) -> AlertChannel:
        return AlertChannel.from_json(
            self.request("GET", f"/v1/alert-channels/{_quote(channel_id)}")
        )

    def create_alert_channel(
        self, name: str, kind: str, config: Mapping[str, Any], *, enabled: bool | None = None
    ) -> AlertChannel:
        """kind "email" ({"to": [...]}), "slack" ({"url"}) or "webhook" ({"url",
        "headers"}); secrets as references ({"secret": "env:NAME"}), never values."""
        body: dict[str, Any] = {"name": name, "kind": kind, "config": dict(config)}
        if enabled is not None:
            body["enabled"] = enabled
        return AlertChannel.from_json(self.request("POST", "/v1/alert-channels", json=body))

    def update_alert_channel(self, channel_id: str, changes: Mapping[str, Any]) -> AlertChannel:
        """PATCH name / config / enabled (the kind cannot change)."""
        return AlertChannel.from_json(
            self.request("PATCH", f"/v1/alert-channels/{_quote(channel_id)}", json=dict(changes))
        )

    def delete_alert_channel(self, channel_id: str) -> None:
        self.request("DELETE", f"/v1/alert-channels/{_quote(channel_id)}")

    def test_alert_channel(self, channel_id: str) -> dict[str, Any]:
        """Send a test message now: {"ok": bool, "detail": "HTTP 200" or why not}. A
        refused destination is the answer, not an error. Not retried after a 503 or a lost
        connection (it would send twice)."""
        result: dict[str, Any] = self.request(
            "POST", f"/v1/alert-channels/{_quote(channel_id)}:test"
        )
        return result

    # Policies are plain dicts: {"failure_threshold", "recovery", "realert_s",
    # "auto_pause_after", "late_after_s", "max_duration_s", "channels": [ids], "source":
    # "schedule" | "tenant" | "built-in"}, and a schedule's also "snoozed_until". Setting
    # one is whole: a field left out takes its built-in default.

    def get_alert_policy(self) -> dict[str, Any]:
        """The tenant's default alert policy (the built-in one until set)."""
        result: dict[str, Any] = self.request("GET", "/v1/alert-policy")
        return result

    def set_alert_policy(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("PUT", "/v1/alert-policy", json=dict(policy))
        return result

    def get_schedule_alert_policy(self, schedule_id: str) -> dict[str, Any]:
        """The policy that applies to the schedule (see "source"), and its snoozed_until."""
        result: dict[str, Any] = self.request(
            "GET", f"/v1/schedules/{_quote(schedule_id)}/alert-policy"
        )
        return result

    def set_schedule_alert_policy(
        self, schedule_id: str, policy: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Give the schedule its own policy, replacing the tenant default for it."""
        result: dict[str, Any] = self.request(
            "PUT", f"/v1/schedules/{_quote(schedule_id)}/alert-policy", json=dict(policy)
        )
        return result

    def delete_schedule_alert_policy(self, schedule_id: str) -> dict[str, Any]:
        """Drop the schedule's own policy; the one that applies now."""
        result: dict[str, Any] = self.request(
            "DELETE", f"/v1/schedules/{_quote(schedule_id)}/alert-policy"
        )
        return result

    def snooze_schedule(self, schedule_id: str, until: str | None) -> dict[str, Any]:
        """Hold the schedule's alerts until `until` (None ends the snooze); the
        schedule's policy with its snoozed_until."""
        result: dict[str, Any] = self.request(
            "POST",
            f"/v1/schedules/{_quote(schedule_id)}:snooze",
            json={"until": until},
            idempotent=True,  # sets a value: the same again is the same state
        )
        return result

    def list_maintenance_windows(self) -> Iterator[MaintenanceWindow]:
        for item in self.paginate("/v1/maintenance-windows"):
            yield MaintenanceWindow.from_json(item)

    def get_maintenance_window(self, window_id: str) -> MaintenanceWindow:
        """One window, read from the list (the API has no GET of one window)."""
        for window in self.list_maintenance_windows():
            if window.id == window_id:
                return window
        raise from_response(
            404, {"error": {"code": "not_found", "message": "maintenance window not found"}}
        )

    def create_maintenance_window(self, definition: Mapping[str, Any]) -> MaintenanceWindow:
        """One-off {"name", "starts_at", "ends_at"} or recurring {"name", "cron",
        "timezone", "duration_s"}; alerts are held while it is open."""
        return MaintenanceWindow.from_json(
            self.request("POST", "/v1/maintenance-windows", json=dict(definition))
        )

    def delete_maintenance_window(self, window_id: str) -> None:
        self.request("DELETE", f"/v1/maintenance-windows/{_quote(window_id)}")

    # ------------------------------------------------------------------ schedules as code

    def apply_schedules(
        self,
        definitions: list[dict[str, Any]],
        *,
        calendars: list[dict[str, Any]] | None = None,
        prune: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """POST /v1/schedules:apply — all or nothing; the summary and per-schedule changes
        (and per-calendar ones when `calendars` is given: None leaves them alone)."""
        body: dict[str, Any] = {"schedules": definitions, "prune": prune, "dry_run": dry_run}
        if calendars is not None:
            body["calendars"] = calendars
        # Keyed by name and all-or-nothing: sending it twice converges to the same state.
        result: dict[str, Any] = self.request(
            "POST", "/v1/schedules:apply", json=body, idempotent=True
        )
        return result

    def export_schedules(self) -> list[dict[str, Any]]:
        """GET /v1/schedules:export — the tenant's definitions, as apply takes them."""
        schedules: list[dict[str, Any]] = self.export_definitions()["schedules"]
        return schedules

    def export_definitions(self) -> dict[str, Any]:
        """GET /v1/schedules:export whole: `schedules` and `calendars`, as apply takes them."""
        result: dict[str, Any] = self.request("GET", "/v1/schedules:export")
        return result
