"""The alert decision, run inside the transaction that ended the executions.

Kept apart from the sender (outbox.py) so the worker's finish path imports only
the named statement: an alert row exists iff the state change that owes it does.
"""

from __future__ import annotations

from collections.abc import Sequence

from dispatch.sql import sql


def decide(*, execution_ids: Sequence[str]) -> int:
    """Insert the alerts these just-finished executions owe (dedup per occurrence and
    kind); returns how many were new. Call in the state change's transaction."""
    return len(sql.rows("alert_decide", {"ids": list(execution_ids)}))
