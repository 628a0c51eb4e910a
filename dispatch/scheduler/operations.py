"""Control pump step for operations (filled in by the run-control work)."""

from __future__ import annotations


def pump_once() -> int:
    return 0
