"""Control pump step for bulk operations: one chunk of one running operation.

The work itself (lock, apply each item through its single-object service,
record progress) is dispatch/services/bulk.py's `operation_step`, the same code
a small operation runs inside its request.
"""

from __future__ import annotations

from dispatch.services.bulk import operation_step


def pump_once() -> int:
    """Items worked this round (0: no running operation free to take)."""
    return operation_step()
