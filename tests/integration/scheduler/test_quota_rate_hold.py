"""The daily quota counts an occurrence once: an attempt the rate limiter handed
back (retry_scheduled, same attempt) is not counted again when it re-fires.

Counted again, a tenant at its quota had its held attempts dropped from every
batch — neither run nor skipped, due forever (found by tests/chaos/test_cache_outage.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings

from dispatch import services
from dispatch.models import Execution
from dispatch.scheduler.loop import Beat
from tenants.models import Tenant
from tenants.roles import Principal
from tests.support.beat_support import empty_queues, running_beat
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture
def beat(db: Any) -> Iterator[Beat]:
    with empty_queues(), running_beat("quota-beat", cycle_s=0.2) as b:
        yield b


def test_an_attempt_held_by_the_rate_limit_refires_without_counting_twice(
    beat: Beat, admin_principal: Principal, tenant: Tenant
) -> None:
    tenant.quota.max_executions_per_day = 2
    tenant.quota.save()
    jobs = [
        services.job_create(actor=admin_principal, data={"target": TARGET, "name": f"h{i}"})[0]
        for i in range(2)
    ]
    beat.cycle()
    rows = list(Execution.objects.filter(schedule__in=jobs))
    assert sorted(r.state for r in rows) == ["queued", "queued"]  # the quota is used up
    # A worker claims one and the rate limiter hands it back (what hold_rate_limit writes).
    held = rows[0]
    Execution.objects.filter(pk=held.pk).update(
        state="retry_scheduled",
        next_attempt_at=db_now() - timedelta(seconds=1),
        reason_code="held_rate_limit",
        reason="waiting: host billing.internal:443 at its rate limit",
    )
    beat.cycle()
    held.refresh_from_db()
    assert (held.state, held.attempt) == ("queued", 1), (held.state, held.reason)
    day = db_now().strftime("%Y%m%d")
    counter = redis.Redis.from_url(settings.REDIS_URL).get(f"sched:quota:{tenant.id}:{day}")
    assert int(counter or 0) == 2
