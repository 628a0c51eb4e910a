"""The console shows `completed` like `paused`: a badge in the list and on the detail
page (with why), and the list's status filter tells completed from active."""

from __future__ import annotations

import pytest

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import TARGET, World, form_data

pytestmark = pytest.mark.django_db


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


def test_the_form_sets_max_runs_and_shows_its_error_inline(world: World) -> None:
    client = world.client("operator")
    bad = client.post("/schedules/new", form_data(name="capped", max_runs="0"))
    assert bad.status_code == 400
    assert not Schedule.objects.filter(name="capped").exists()
    assert "must be a whole number in 1.." in bad.content.decode()
    ok = client.post("/schedules/new", form_data(name="capped", max_runs="3"))
    assert ok.status_code == 302, ok.content.decode()[-2000:]
    stored = Schedule.objects.get(name="capped")
    assert stored.max_runs == 3
    detail = client.get(f"/schedules/{stored.pk}/").content.decode()
    assert "at most 3 successful runs (0 so far)" in detail
    # A one-off's submission ignores the field (it applies to recurring schedules only).
    once = form_data(name="once", kind="once", run_at="2030-01-01T09:00", cron="", max_runs="0")
    assert client.post("/schedules/new", once).status_code == 302
    assert Schedule.objects.get(name="once").max_runs is None
