"""The beat's last defence against a call that never returns.

Every write of the beat is fenced, so a beat stuck inside a database or broker
call is harmless to correctness: its partitions expire and others take them.
But a process that hangs forever is invisible to its supervisor — it neither
works nor exits, and a SIGTERM only sets a flag that the stuck main thread
never reads (psycopg waits in C; a black-holed peer that keeps ACKing at the
TCP level trips no socket timeout). Two bounds make it visible:

* no loop iteration for `stall_s` → log why and exit 70, so the supervisor
  restarts it (a fresh process reconnects with connect timeouts);
* a SIGTERM not honoured within `grace_s` (the lease: after it, releasing
  would not help anyone) → exit 143 as the default SIGTERM action would.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger("dispatch.beat")

STALL_EXIT_CODE = 70  # EX_SOFTWARE
TERM_EXIT_CODE = 143  # 128 + SIGTERM


class Watchdog:
    def __init__(self, *, name: str, stall_s: float, grace_s: float) -> None:
        self.name = name
        self.stall_s = stall_s
        self.grace_s = grace_s
        self._last = time.monotonic()
        self._done = threading.Event()

    def alive(self) -> None:
        """The main loop made progress (called once per iteration)."""
        self._last = time.monotonic()

    def start(self) -> None:
        if self.stall_s > 0:
            threading.Thread(target=self._watch, name="beat-watchdog", daemon=True).start()

    def stop(self) -> None:
        self._done.set()

    def terminating(self) -> None:
        """A stop was asked for: exit on our own if the main thread cannot get there."""
        timer = threading.Timer(self.grace_s, self._exit_after_term)
        timer.daemon = True
        timer.start()

    def _watch(self) -> None:
        while not self._done.wait(1.0):
            stalled = time.monotonic() - self._last
            if stalled > self.stall_s:
                log.critical(
                    "beat %s: no cycle for %.0f s (a database or broker call does not "
                    "return); exiting so that the supervisor restarts it",
                    self.name,
                    stalled,
                )
                logging.shutdown()
                os._exit(STALL_EXIT_CODE)

    def _exit_after_term(self) -> None:
        if self._done.is_set():
            return
        log.error(
            "beat %s: still running %.0f s after SIGTERM (stuck in a call); exiting",
            self.name,
            self.grace_s,
        )
        logging.shutdown()
        os._exit(TERM_EXIT_CODE)
