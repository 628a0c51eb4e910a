"""Errors of the tenants app; each carries a stable `code` the API returns."""

from core.errors import AppError


class TenantsError(AppError):
    code = "tenants_error"
    status = 400


class NotFound(TenantsError):
    code = "not_found"
    status = 404


class PermissionDenied(TenantsError):
    code = "forbidden"
    status = 403


class InvalidInput(TenantsError):
    code = "invalid"
    status = 400
