"""The alert decision, run inside the transaction that ended the executions.

Kept apart from the sender (outbox.py) so the worker's finish path imports only
the named statement: an alert row exists iff the state change that owes it does.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dispatch.sql import sql


def decide(*, execution_ids: Sequence[str]) -> int:
    """Insert the alerts these just-finished executions owe (dedup per occurrence and
    kind); returns how many were new. Call in the state change's transaction."""
    return len(sql.rows("alert_decide", {"ids": list(execution_ids)}))


@dataclass
class Missed:
    """Per schedule, the occurrences one firing found beyond their misfire grace."""

    schedule_ids: list[uuid.UUID] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    firsts: list[datetime] = field(default_factory=list)
    lasts: list[datetime] = field(default_factory=list)

    def add(
        self, schedule_id: uuid.UUID, *, missed: int, skipped: int, first: datetime, last: datetime
    ) -> None:
        self.schedule_ids.append(schedule_id)
        self.missed.append(missed)
        self.skipped.append(skipped)
        self.firsts.append(first)
        self.lasts.append(last)


def decide_missed(missed: Missed) -> int:
    """Insert the `missed` alerts these schedules owe (one per schedule and outage,
    deduplicated on its newest missed occurrence); returns how many were new. Call in
    the firing transaction that recorded the misfire decisions, after the inserts."""
    params = {
        "schedule_ids": missed.schedule_ids,
        "missed": missed.missed,
        "skipped": missed.skipped,
        "firsts": missed.firsts,
        "lasts": missed.lasts,
    }
    return len(sql.rows("alert_decide_missed", params))
