"""`GET /v1/schedules/{id}/health`: the schedule's health alone (the viewer role reads
it; another tenant's schedule is a 404 like a missing one)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api.health_out import HealthDoc, health_out
from dispatch.api.views import SCHEDULE_ID, principal


class ScheduleHealthView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_health",
        parameters=[SCHEDULE_ID],
        responses={200: HealthDoc},
        description="Last run, next run, success rate and p50/p95 duration over 24 h / 7 d / "
        "30 d, and consecutive failures. Counted: succeeded (success) and dead (failure, "
        "retries spent); skipped and cancelled runs count as neither. The same object as "
        "`health` in GET /v1/schedules/{id}.",
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = principal(request).tenant
        schedule = selectors.schedule_get(tenant=tenant, schedule_id=pk)
        health = selectors.schedule_health(tenant=tenant, schedule=schedule, now=services.db_now())
        return Response(health_out(health))
