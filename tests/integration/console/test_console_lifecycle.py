"""The console shows `completed` like `paused`: a badge in the list and on the detail
page (with why), and the list's status filter tells completed from active."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import TARGET, World, build_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: Any) -> World:
    return build_world()


def test_completed_schedule_has_a_badge_a_reason_and_a_filter(world: World) -> None:
    done = services.schedule_create(
        actor=world.admin_p,
        data={"name": "campaign", "cron": "0 * * * *", "target": TARGET, "max_runs": 2},
    )
    # Two successes counted (the worker's finish writes these; see tests/integration/api).
    Schedule.objects.filter(pk=done.pk).update(runs_succeeded=2, next_run_at=None)
    client = world.client("viewer")
    page = client.get("/schedules/?status=completed").content.decode()
    assert "campaign" in page and "nightly" not in page
    assert '<span class="badge badge-muted" title="completed: reached max_runs 2">completed' in page
    active = client.get("/schedules/?status=active").content.decode()
    assert "nightly" in active and "campaign" not in active
    detail = client.get(f"/schedules/{done.pk}/").content.decode()
    assert 'id="completed-note"' in detail
    assert "Completed: reached max_runs 2 (2 succeeded)" in detail
    assert "Raise max_runs" in detail
    # Not completed: no note.
    assert (
        'id="completed-note"' not in client.get(f"/schedules/{world.schedule.pk}/").content.decode()
    )
