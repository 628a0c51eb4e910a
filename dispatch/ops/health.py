"""Liveness (/healthz: the process answers) and readiness (/readyz: a database that
takes writes, migrations applied, the broker reachable).

/readyz names every reason it is not ready, so a load balancer's log or an operator's
curl says why: `database_unreachable`, `database_read_only` (a standby, or a primary
demoted under this process's sessions), `database_in_recovery`, `database_busy`,
`database_error` (any other error of the check), `migrations_pending`,
`broker_unreachable` (docs/how-to/operate.md).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

from core.db import forget_connection, unavailable_reason, write_problem


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database(checks: dict[str, str], reasons: list[str]) -> None:
    """The database's and the migrations' checks: a server that takes writes, nothing pending."""
    pending: list[Any] = []
    try:
        problem = write_problem()
        if problem is None:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        problem = unavailable_reason(exc)
        if problem is None:  # not an outage: an error of the check itself, named
            checks["database"] = f"error: {exc.__class__.__name__}"
            reasons.append("database_error")
            return
    if problem is not None:
        if problem.reconnect:
            # This thread's next request (the probe's next round) connects anew: to
            # the new primary once a fail-over has one, not to the old server again.
            forget_connection()
        checks["database"] = f"{problem.value}: {problem.sentence}"
        reasons.append(f"database_{problem.value}")
        return
    checks["database"] = "ok"
    checks["migrations"] = f"{len(pending)} pending" if pending else "ok"
    if pending:
        reasons.append("migrations_pending")


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    reasons: list[str] = []
    _database(checks, reasons)
    try:
        from kombu import Connection

        with Connection(settings.CELERY_BROKER_URL, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"unreachable: {exc.__class__.__name__}"
        reasons.append("broker_unreachable")
    return JsonResponse(
        {"status": "not ready" if reasons else "ready", "reasons": reasons, "checks": checks},
        status=503 if reasons else 200,
    )
