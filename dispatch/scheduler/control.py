"""The control pump: carries running backfills and bulk operations forward.

A backfill or a large bulk operation is a row with a position; its items are
worked through in small transactions by whichever beat's pump gets to it first
(`FOR UPDATE SKIP LOCKED` on the object's row), so a crash mid-way loses
nothing: the next pump, in this beat or another, goes on from the position
the last committed chunk recorded.

It runs on a thread of its own with its own database connection (Django's
connections are per thread), never inside the beat's cycle: a bulk pause of
thousands of schedules must not delay a firing by a millisecond.

Each step does one bounded chunk of work and returns how much it did; the
pump goes round again at once while any step did something, and otherwise
sleeps CONTROL_INTERVAL_S.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.db import connection

log = logging.getLogger("dispatch.control")

Step = Callable[[], int]


def steps() -> list[Step]:
    """The pump's steps, imported late: they import the services, which import the beat's modules."""
    from dispatch.alerting import lateness, outbox
    from dispatch.scheduler import backfills, operations
    from dispatch.services.calendars import calendars_refresh_once

    return [
        backfills.pump_once,
        operations.pump_once,
        lateness.scan_once,
        outbox.pump_once,
        calendars_refresh_once,
    ]


def pump_once() -> int:
    """One chunk of every step, on the calling thread's connection (tests call this)."""
    return sum(step() for step in steps())


class ControlPump:
    def __init__(self, *, name: str, interval_s: float | None = None) -> None:
        self.name = name
        self.interval_s = (
            float(settings.CONTROL_INTERVAL_S) if interval_s is None else float(interval_s)
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"control-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    busy = pump_once()
                except Exception as exc:
                    # The chunk's transaction rolled back; its object stays where the
                    # last committed chunk left it and is taken up again next round.
                    log.warning("control pump %s: %s; retrying", self.name, exc)
                    connection.close()
                    busy = 0
                if not busy:
                    self._stop.wait(self.interval_s)
        finally:
            connection.close()
