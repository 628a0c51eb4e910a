"""OpenAPI post-processing: the error answers every operation can give.

drf-spectacular documents the success responses each view declares; the 4xx
and 503 answers come from shared machinery (authentication, RBAC, throttling,
the body guard, core/api/errors.py), so they are added here, per operation,
with the one error shape `{"error": {"code", "message", "detail"}}`.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "detail"],
            "properties": {
                "code": {"type": "string", "description": "stable, machine-readable"},
                "message": {"type": "string", "description": "names the offending field first"},
                "detail": {
                    "type": "object",
                    "description": "offending field (dotted path) → reasons",
                    "additionalProperties": True,
                },
            },
        }
    },
}
RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}

# status → (description, response headers)
ERRORS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "400": ("invalid input; `detail` names the field", None),
    "401": ("missing, invalid, revoked or expired token", None),
    "403": ("your role does not allow this", None),
    "404": ("no such object in your tenant (another tenant's is the same 404)", None),
    "409": ("version or idempotency conflict", None),
    "413": ("request body larger than API_MAX_BODY_BYTES", None),
    "415": ("request body is not application/json", None),
    "422": ("tenant quota exceeded", None),
    "428": ("no If-Match header and no version in the body", None),
    "429": ("throttled; retry after Retry-After seconds", RETRY_AFTER),
    "503": (
        "the database is unreachable, read-only or in recovery (a fail-over, a restart); "
        "retry after Retry-After seconds. Not proof that nothing was done: send a POST "
        "again only when it carries an idempotency key or is idempotent",
        RETRY_AFTER,
    ),
}
EVERYWHERE = ["400", "401", "403", "429", "503"]
WITH_BODY = ["413", "415"]
# Beyond EVERYWHERE and what path parameters / bodies imply, per "METHOD path".
SPECIFIC = {
    "POST /v1/schedules": ["422"],
    "PATCH /v1/schedules/{id}": ["409", "428"],
    "POST /v1/jobs": ["409", "422"],
    "GET /v1/executions": ["404"],
    "POST /v1/operations/{id}:cancel": ["409"],
    "DELETE /v1/jobs/{id}": ["409"],
}


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """POSTPROCESSING_HOOKS entry: document the shared error answers."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            codes = list(EVERYWHERE)
            if "{" in path:
                codes.append("404")
            if method in {"post", "put", "patch"}:
                codes += WITH_BODY
            codes += SPECIFIC.get(f"{method.upper()} {path}", [])
            responses = operation.setdefault("responses", {})
            for code in sorted(set(codes)):
                description, headers = ERRORS[code]
                answer: dict[str, Any] = {
                    "description": description,
                    "content": {"application/json": {"schema": ref}},
                }
                if headers:
                    answer["headers"] = headers
                responses.setdefault(code, answer)
    return result
