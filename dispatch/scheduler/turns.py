"""Tenants in turn for the control pump's steps (backfills, bulk operations).

A step's candidate read orders by each tenant's own queue position first and
then by tenant, starting after `after` and wrapping round (`tenant_id <= after`
sorts last): one tenant's long queue gets one turn per round like another's
single item. The step reports the tenant it served; nothing is stored, so a
restarted pump simply starts from the lowest tenant id.
"""

from __future__ import annotations


class TenantTurn:
    """The tenant a pump step served last (tenant ids are positive: 0 means none yet)."""

    def __init__(self) -> None:
        self.after = 0

    def served(self, tenant_id: int) -> None:
        self.after = int(tenant_id)
