"""Async completion: runs that the tenant's service finishes by calling back.

A target with `"completion": "callback"` (HTTP or queue) hands the attempt off: the
HTTP target answers `202 Accepted` (a queue message is published) and the attempt
stays `running`, held by the target instead of a worker, until the tenant's service
calls back on the attempt's completion capability:

- `POST /v1/executions/{id}:heartbeat` extends the lease by the target's
  `heartbeat_s` (never past the attempt's deadline) and may carry progress;
- `POST /v1/executions/{id}:succeed` (an output value) or `:fail` (an error, and
  whether it is worth a retry) ends the attempt as a worker's finish would.

The capability is a token signed with the platform's SECRET_KEY naming the
execution, the attempt and its fencing token: it opens nothing else, and it stops
working when the attempt does (cancelled, timed out, swept, re-run: the token moved
on), which the callback learns as 409 — recorded on the timeline like a stale
worker's finish. Missing heartbeats let the lease lapse, and the sweeper retries the
occurrence by its schedule's policy; the attempt's `timeout_s` bounds the whole run.
docs/explanation/delivery-contract.md states the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing

from dispatch.exceptions import InvalidSchedule

MODES = ("response", "callback")
DEFAULT_HEARTBEAT_S = 60
MIN_HEARTBEAT_S = 5
MAX_HEARTBEAT_S = 3600
# A hand-off (the HTTP request answered 202, the publish confirmed) must end within
# this, whatever the run's timeout: the run itself may last the whole timeout_s.
HANDOFF_TIMEOUT_S = 30
# The worker's lease_owner while the target holds the attempt: the sweeper and the
# explainer tell a lapsed callback from a lost worker by it.
OWNER_PREFIX = "callback:"
MAX_OUTPUT_BYTES = 16 * 1024
MAX_MESSAGE = 500
MAX_ERROR = 2000
MAX_LOG_LINES = 100  # per heartbeat, for the attempt's live log (dispatch/logs.py)
_SALT = "dispatch.completion"


def clean(config: dict[str, Any]) -> dict[str, Any]:
    """`target.completion` and `target.heartbeat_s` as stored: {} for the default
    (the response or the publish ends the attempt)."""
    mode = config.get("completion", "response")
    if mode not in MODES:
        raise InvalidSchedule.field("target.completion", f"must be one of {', '.join(MODES)}")
    beat = config.get("heartbeat_s")
    if mode == "response":
        if beat is not None:
            raise InvalidSchedule.field(
                "target.heartbeat_s", 'applies only with "completion": "callback"'
            )
        return {}
    if beat is None:
        beat = DEFAULT_HEARTBEAT_S
    if isinstance(beat, bool) or not isinstance(beat, int):
        raise InvalidSchedule.field("target.heartbeat_s", "must be a whole number of seconds")
    if not MIN_HEARTBEAT_S <= beat <= MAX_HEARTBEAT_S:
        raise InvalidSchedule.field(
            "target.heartbeat_s", f"must be {MIN_HEARTBEAT_S}..{MAX_HEARTBEAT_S} seconds"
        )
    return {"completion": "callback", "heartbeat_s": beat}


def by_callback(target: dict[str, Any]) -> bool:
    return target.get("completion") == "callback"


def heartbeat_s(target: dict[str, Any]) -> int:
    return int(target.get("heartbeat_s") or DEFAULT_HEARTBEAT_S)


def base_url(execution_id: str) -> str:
    """Where the tenant's service calls back: append `:heartbeat`, `:succeed` or `:fail`."""
    return f"{str(settings.PLATFORM_URL).rstrip('/')}/v1/executions/{execution_id}"


def issue(*, execution_id: str, attempt: int, fencing_token: int) -> str:
    """The attempt's completion capability."""
    return signing.dumps(
        {"e": execution_id, "a": attempt, "t": fencing_token}, salt=_SALT, compress=False
    )


class BadCapability(Exception):
    """The bearer token is not a completion capability for this execution."""


@dataclass(frozen=True)
class Capability:
    execution_id: str
    attempt: int
    fencing_token: int


def verify(token: str, *, execution_id: str) -> Capability:
    try:
        raw = signing.loads(token, salt=_SALT)
    except signing.BadSignature:
        raise BadCapability("not a completion token this platform issued") from None
    if not isinstance(raw, dict) or raw.get("e") != execution_id:
        raise BadCapability("the completion token is for another execution")
    return Capability(execution_id, int(raw["a"]), int(raw["t"]))
