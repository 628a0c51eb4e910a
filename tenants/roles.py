"""Roles and the principal a request acts as (a console user or a service token)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenants.models import Tenant


class Role(IntEnum):
    """viewer < operator < admin: each role can do everything the lower ones can."""

    VIEWER = 10
    OPERATOR = 20
    ADMIN = 30

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls[value.upper()]
        except KeyError:
            raise ValueError(f"unknown role {value!r}: use viewer, operator or admin") from None


ROLE_CHOICES = [(r.label, r.label) for r in Role]


@dataclass(frozen=True)
class Principal:
    """Who is acting, in which tenant, with which role.

    `actor_kind` is "user", "token" or "system"; `label` is what the audit log shows.
    """

    tenant: Tenant
    role: Role
    actor_kind: str
    actor_id: str
    label: str

    is_authenticated = True
    is_anonymous = False

    def can(self, needed: Role) -> bool:
        return self.role >= needed
