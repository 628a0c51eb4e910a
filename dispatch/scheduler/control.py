"""The control pump: carries running backfills and bulk operations forward, scans for
late occurrences and sends the alert outbox.

A backfill or a large bulk operation is a row with a position; its items are
worked through in small transactions by whichever beat's pump gets to it first
(`FOR UPDATE SKIP LOCKED` on the object's row), so a crash mid-way loses
nothing: the next pump, in this beat or another, goes on from the position
the last committed chunk recorded.

It runs on threads of its own, never inside the beat's cycle: a bulk pause of
thousands of schedules must not delay a firing by a millisecond. Each step has
its own thread, with its own database connection (Django's connections are per
thread), so no step shares another's fate: an alert held by a tenant's slow peer
(up to ALERT_WEBHOOK_TIMEOUT_S a send) delays neither a backfill, nor a bulk
operation, nor the late scan. The alert step itself hands each tenant's alerts to
a thread of their own (dispatch/alerting/outbox.py) and does not wait for them.

Each step does one bounded chunk of work and returns how much it did; a step's
thread goes round again at once while it did something, and otherwise sleeps
CONTROL_INTERVAL_S — or less: a step with a wake channel (WAKE_CHANNELS) LISTENs on it
and goes round as soon as a notification comes. The backfill step's channel is
notified by the worker's finish of a backfill's run, so the next run is released
when the last one ends, not up to an interval later (one at a time under overlap
forbid, the default, that interval was the backfill's pace).
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from core.db import open_listener

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
        outbox.pump_step,
        calendars_refresh_once,
    ]


def wake_channel(step: Step) -> str | None:
    """The channel that wakes `step` before its interval is up, if it has one."""
    from dispatch.scheduler import backfills
    from dispatch.services import BACKFILL_WAKE_CHANNEL

    return BACKFILL_WAKE_CHANNEL if step is backfills.pump_once else None


def pump_once() -> int:
    """One chunk of every step, one after the other on the calling thread's connection,
    and the alert sends the outbox's step started, waited for (tests call this)."""
    from dispatch.alerting import outbox

    done = sum(step() for step in steps())
    outbox.drain()
    return done


class ControlPump:
    def __init__(self, *, name: str, interval_s: float | None = None) -> None:
        self.name = name
        self.interval_s = (
            float(settings.CONTROL_INTERVAL_S) if interval_s is None else float(interval_s)
        )
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stop.clear()
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(step,),
                name=f"control-{self.name}-{getattr(step, '__module__', 'step').rsplit('.', 1)[-1]}",
                daemon=True,
            )
            for step in steps()
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        from dispatch.alerting import outbox

        self._stop.set()
        ends = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, ends - time.monotonic()))
        self._threads = []
        # The alert sends still in flight each end within their deadline; a send cut
        # short by the process's exit is taken up again after its claim's lease.
        outbox.drain(max(0.0, ends - time.monotonic()))

    def _run(self, step: Step) -> None:
        waker = _Waker(wake_channel(step), self.name)
        try:
            while not self._stop.is_set():
                try:
                    busy = step()
                except Exception as exc:
                    # The chunk's transaction rolled back; its object stays where the
                    # last committed chunk left it and is taken up again next round.
                    log.warning("control pump %s: %s; retrying", self.name, exc)
                    connection.close()
                    busy = 0
                if not busy:
                    waker.wait(self.interval_s, self._stop)
        finally:
            waker.close()
            connection.close()


class _Waker:
    """Waits an interval, or less when `channel` is notified: LISTEN on a connection of
    its own (autocommit; Django's transactions never hold it). Without a channel, or
    while LISTEN is unavailable, it only waits the interval."""

    def __init__(self, channel: str | None, name: str) -> None:
        self.channel, self.name = channel, name
        self.conn: psycopg.Connection[Any] | None = None

    def _open(self) -> None:
        if self.channel is None or self.conn is not None:
            return
        try:
            self.conn = open_listener(self.channel)
        except psycopg.Error as exc:
            log.info("control pump %s: LISTEN %s unavailable (%s)", self.name, self.channel, exc)
            self.close()

    def wait(self, interval_s: float, stop: threading.Event) -> None:
        self._open()
        if self.conn is None:
            stop.wait(interval_s)
            return
        # Woken by a notification, or at the latest after the interval; `stop` is
        # looked at after each (a second at most, as the beat's own wait).
        ends = time.monotonic() + interval_s
        while not stop.is_set() and (left := ends - time.monotonic()) > 0:
            try:
                ready, _, _ = select.select([self.conn.fileno()], [], [], min(left, 1.0))
                if ready:
                    woken = [note.channel for note in self.conn.notifies(timeout=0)]
                    if woken:
                        return
            except (psycopg.Error, OSError, ValueError):
                self.close()  # opened again at the next wait
                stop.wait(max(0.0, ends - time.monotonic()))
                return

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None
