"""Errors of the tenants app; each carries a stable `code` the API returns."""

from core.errors import AppError


class TenantsError(AppError, code="tenants_error", status=400):
    """Any error of the tenants app."""


class NotFound(TenantsError, code="not_found", status=404):
    """No such tenant, token, user or membership (for this tenant)."""


class PermissionDenied(TenantsError, code="forbidden", status=403):
    """The actor may not do this."""


class InvalidInput(TenantsError, code="invalid", status=400):
    """Input that does not validate; `detail` names the field."""


class Gone(TenantsError, code="gone", status=410):
    """The object existed but cannot be used any more (an invitation used, revoked or expired)."""
