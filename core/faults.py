"""Fault points for the crash-boundary and chaos tests.

At a named point the process dies as kill -9 would (no cleanup, no commit,
no ack). Unset in production: `SCHED_FAULT_POINT` is empty and every call is
a string comparison. `SCHED_FAULT_ONCE` names a marker file so that only the
first process to reach the point dies — a Celery pool replaces its dead child
with one that inherits the same environment, and a fault that fires on every
retry would be a poison job, not a crash.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("dispatch.faults")

POINT = os.environ.get("SCHED_FAULT_POINT", "")
ONCE = os.environ.get("SCHED_FAULT_ONCE", "")


def crash_at(point: str, detail: str = "") -> None:
    """Die here if this is the configured point; `detail` (e.g. an execution id)
    goes into the ONCE marker so a test knows exactly what was interrupted."""
    if not POINT or point != POINT:
        return
    if ONCE:
        try:
            fd = os.open(ONCE, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, detail.encode())
        os.close(fd)
    log.warning("fault point %s reached: exiting abruptly", point)
    os._exit(137)
