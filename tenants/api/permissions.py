"""RBAC for API views: each view names the role each method (or action) needs."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from tenants.roles import Principal, Role
from tenants.services import audit_denied

READ_METHODS = {"GET", "HEAD", "OPTIONS"}


def required_role(view: Any, request: Request) -> Role:
    action_roles: dict[str, Role] = getattr(view, "action_roles", {})
    action = getattr(view, "rbac_action", None)
    if action and action in action_roles:
        return action_roles[action]
    if request.method in READ_METHODS:
        return getattr(view, "read_role", Role.VIEWER)
    return getattr(view, "write_role", Role.OPERATOR)


class HasTenantRole(permissions.BasePermission):
    message = "your role does not allow this"

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, Principal):
            return False
        needed = required_role(view, request)
        if principal.can(needed):
            return True
        # Denied attempts are part of the audit trail.
        audit_denied(actor=principal, method=request.method, path=request.path, needed=needed)
        return False
