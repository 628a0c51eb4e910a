"""Celery tasks: thin; ids in, one service call.

`dispatch.run_execution` is the contract with the beat: args
`[execution_id: str, attempt: int]`, JSON. A message that cannot name an
execution (malformed) is counted, logged and acknowledged — it must never
crash a worker or loop through the broker.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery import shared_task
from django.db import DatabaseError

from dispatch.worker import alerts, ratelimit, runner

log = logging.getLogger("dispatch.worker")


def parse_message(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, int] | None:
    """(execution_id, attempt) from a task message, or None if it is not one."""
    values = list(args)
    if not values and kwargs:
        values = [kwargs.get("execution_id"), kwargs.get("attempt")]
    if len(values) != 2:
        return None
    raw_id, attempt = values
    if not isinstance(raw_id, str) or isinstance(attempt, bool) or not isinstance(attempt, int):
        return None
    try:
        execution_id = str(uuid.UUID(raw_id))
    except ValueError:
        return None
    if attempt < 1:
        return None
    return execution_id, attempt


@shared_task(name="dispatch.run_execution", ignore_result=True, acks_late=True)
def run_execution(*args: Any, **kwargs: Any) -> str:
    parsed = parse_message(args, kwargs)
    if parsed is None:
        ratelimit.count_delivery("malformed")
        log.warning("malformed run_execution message dropped: args=%.200r", args)
        return "malformed"
    execution_id, attempt = parsed
    try:
        return runner.run_execution(execution_id=execution_id, attempt=attempt)
    except DatabaseError as exc:
        # Nothing is lost by acknowledging: an unclaimed row is re-published by the
        # beat, a claimed one is rescued by the sweeper when its lease lapses. (A claim
        # that finds the database away waits for it first: runner.claim_waiting.)
        ratelimit.count_delivery("db_error")
        log.error("execution %s attempt %s: database error: %s", execution_id, attempt, exc)
        return "db_error"


@shared_task(name="dispatch.send_dead_notice", ignore_result=True, acks_late=True)
def send_dead_notice(execution_id: str) -> None:
    alerts.send_dead_notice(execution_id=execution_id)
