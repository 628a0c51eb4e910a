"""Liveness (/healthz: the process answers) and readiness (/readyz: DB, broker, migrations)."""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

from core.db import ping


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        ping()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        checks["database"] = "ok"
        checks["migrations"] = "ok" if not pending else f"{len(pending)} pending"
    except DatabaseError as exc:
        checks["database"] = f"unavailable: {exc.__class__.__name__}"
    try:
        from kombu import Connection

        with Connection(settings.CELERY_BROKER_URL, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"unavailable: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status=200 if ready else 503,
    )
