"""Control pump step for bulk operations: one chunk of one running operation.

The work itself (lock, apply each item through its single-object service,
record progress) is dispatch/services/bulk.py's `operation_step`, the same code
a small operation runs inside its request. Tenants take turns: each round starts
after the tenant this process's pump served last.
"""

from __future__ import annotations

from dispatch.scheduler.turns import TenantTurn
from dispatch.services.bulk import operation_step

# Per process (each beat's pump keeps its own turn); a lost update between two threads
# only repeats a turn, the order stays fair.
_turn = TenantTurn()


def pump_once() -> int:
    """Items worked this round (0: no running operation free to take)."""
    step = operation_step(after_tenant=_turn.after)
    if step.tenant_id is not None:
        _turn.served(step.tenant_id)
    return step.worked
