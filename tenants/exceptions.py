"""Errors of the tenants app; each carries a stable `code` the API returns."""


class TenantsError(Exception):
    code = "tenants_error"
    status = 400

    def __init__(self, message: str, *, detail: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}


class NotFound(TenantsError):
    code = "not_found"
    status = 404


class PermissionDenied(TenantsError):
    code = "forbidden"
    status = 403


class InvalidInput(TenantsError):
    code = "invalid"
    status = 400
