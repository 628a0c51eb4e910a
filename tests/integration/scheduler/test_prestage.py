"""Pre-staged firing, in-process against the real PostgreSQL and broker: rows are
staged a minute ahead and published at their due time; an edit, a pause or a delete
within the window takes effect for the staged occurrence (withdrawn and re-planned,
recorded); a beat that dies with a staged heap loses nothing and fires nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler.loop import Beat, BeatConfig
from dispatch.states import EventKind
from tenants.roles import Principal
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
AHEAD_S = 60.0


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "stage-beat", "cycle_s": 0.2, "lookahead_s": AHEAD_S}


def job_in(principal: Principal, seconds: float, name: str = "j") -> Schedule:
    run_at = db_now() + timedelta(seconds=seconds)
    job, _ = services.job_create(
        actor=principal, data={"target": TARGET, "name": name, "run_at": run_at}
    )
    return job


def cycle_until(beats: list[Beat], done: Callable[[], bool], *, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached"
        for b in beats:
            b.cycle()
        time.sleep(0.1)


def queued(schedule: Schedule) -> list[Execution]:
    return list(Execution.objects.filter(schedule=schedule, state="queued"))


def replanned(schedule: Schedule) -> list[str]:
    return list(
        ExecutionEvent.objects.filter(schedule=schedule, kind=EventKind.REPLANNED).values_list(
            "message", flat=True
        )
    )


def test_staged_ahead_then_published_at_due_and_a_priority_edit_replans_it(
    beat: Beat, admin_principal: Principal
) -> None:
    job = job_in(admin_principal, 4)
    beat.cycle()
    # Staged: the row exists, next_run_at advanced, in the heap, not published.
    (staged,) = Execution.objects.filter(schedule=job)
    assert staged.state == "scheduled" and staged.enqueued_at is None
    job.refresh_from_db()
    assert job.next_run_at is None and str(staged.id) in beat.in_heap

    services.schedule_update(
        actor=admin_principal,
        schedule_id=job.id,
        data={"priority": "high"},
        expected_version=None,
    )
    # Withdrawn (deleted, so the same instant can be planned again) and recorded.
    assert not Execution.objects.filter(id=staged.id).exists()
    job.refresh_from_db()
    assert job.next_run_at == staged.scheduled_for
    (msg,) = replanned(job)
    assert msg.startswith("re-planned: schedule edited at ")
    assert f"by {admin_principal.label} (1 staged occurrence withdrawn, first " in msg

    beat.cycle()  # re-planned from the new definition, staged again
    (again,) = Execution.objects.filter(schedule=job)
    assert again.id != staged.id and again.scheduled_for == staged.scheduled_for
    assert again.state == "scheduled"
    cycle_until([beat], lambda: bool(queued(job)))
    (sent,) = queued(job)
    # The withdrawn id stayed in the heap; admission found it gone and sent nothing for it.
    assert sent.id == again.id and sent.queue.startswith("high.")
    assert Execution.objects.filter(schedule=job).count() == 1


def test_pause_within_the_window_withdraws_and_resume_fires_it_once(
    beat: Beat, admin_principal: Principal
) -> None:
    job = job_in(admin_principal, 3)
    other = job_in(admin_principal, 3, name="other")
    beat.cycle()
    (staged,) = Execution.objects.filter(schedule=job)
    services.schedule_pause(actor=admin_principal, schedule_id=job.id, reason="maintenance")
    job.refresh_from_db()
    assert job.next_run_at == staged.scheduled_for
    (msg,) = replanned(job)
    assert msg.startswith("re-planned: schedule paused at ")
    # Past the due time: the other job went out, the paused one did not.
    cycle_until([beat], lambda: bool(queued(other)))
    assert not Execution.objects.filter(schedule=job).exists()
    services.schedule_resume(actor=admin_principal, schedule_id=job.id)
    cycle_until([beat], lambda: bool(queued(job)))
    assert Execution.objects.filter(schedule=job).count() == 1


def test_delete_within_the_window_cancels_the_staged_occurrence(
    beat: Beat, admin_principal: Principal
) -> None:
    job = job_in(admin_principal, 2)
    other = job_in(admin_principal, 2, name="other")
    beat.cycle()
    (staged,) = Execution.objects.filter(schedule=job)
    services.schedule_delete(actor=admin_principal, schedule_id=job.id)
    cycle_until([beat], lambda: bool(queued(other)))
    staged.refresh_from_db()
    assert staged.state == "cancelled" and staged.enqueued_at is None


def test_manual_runs_are_not_withdrawn_by_an_edit(beat: Beat, admin_principal: Principal) -> None:
    s = services.schedule_create(
        actor=admin_principal,
        data={"name": "c", "target": TARGET, "cron": "0 0 1 1 *", "misfire_grace_s": 600},
    )
    services.schedule_trigger(actor=admin_principal, schedule_id=s.id)
    manual = Execution.objects.get(schedule=s)
    services.schedule_update(
        actor=admin_principal, schedule_id=s.id, data={"priority": "high"}, expected_version=None
    )
    assert Execution.objects.filter(id=manual.id).exists() and not replanned(s)


def test_a_beat_that_dies_with_a_staged_heap_loses_nothing_and_fires_nothing_twice(
    db: Any, admin_principal: Principal
) -> None:
    admin_principal.tenant.quota.max_schedules = 100
    admin_principal.tenant.quota.max_concurrent = 100
    admin_principal.tenant.quota.save()
    jobs = [job_in(admin_principal, 4, name=f"j{i}") for i in range(20)]

    def make(name: str) -> Beat:
        b = Beat(
            BeatConfig(
                name=name,
                partitions=settings.SCHEDULER_PARTITIONS,
                lease_ttl_s=2,
                cycle_s=0.2,
                lookahead_s=AHEAD_S,
            )
        )
        b.start()
        return b

    first = make("stage-first")
    first.cycle()
    assert len(first.in_heap) == 20  # staged and loaded, then it "dies": no shutdown
    second = make("stage-second")
    try:
        cycle_until(
            [second],
            lambda: Execution.objects.filter(schedule__in=jobs, state="queued").count() == 20,
        )
        # The dead beat comes back (a long pause): its epochs are stale, its heap
        # still holds every id; it admits nothing.
        for _ in range(3):
            first.cycle()
        rows = list(Execution.objects.filter(schedule__in=jobs))
        assert len(rows) == 20 and {r.state for r in rows} == {"queued"}
        assert {r.fired_by for r in rows} == {"stage-first"}
        assert first.counters.published == 0 and second.counters.published == 20
    finally:
        second.shutdown()
        first.shutdown()


def test_a_cron_edit_within_the_window_replans_and_the_explainer_says_so(
    beat: Beat, admin_principal: Principal
) -> None:
    from dispatch.explain import explain

    s = services.schedule_create(
        actor=admin_principal,
        data={"name": "m", "target": TARGET, "cron": "* * * * *", "jitter_s": 0},
    )
    beat.cycle()  # a minutely schedule always has an occurrence within 60 s
    staged = list(Execution.objects.filter(schedule=s, state="scheduled"))
    assert staged
    services.schedule_update(
        actor=admin_principal, schedule_id=s.id, data={"cron": "0 0 1 1 *"}, expected_version=None
    )
    assert not Execution.objects.filter(schedule=s).exists()
    s.refresh_from_db()
    assert s.next_run_at is not None and s.next_run_at.month == 1 and s.next_run_at.day == 1
    beat.cycle()  # nothing to re-plan within the window under the new definition
    assert not Execution.objects.filter(schedule=s).exists()
    answer = explain(schedule=s, at=staged[0].scheduled_for)
    assert "re-planned: schedule edited at " in answer.sentence, answer.sentence


def test_a_chunk_whose_admission_lost_the_database_is_published_on_a_later_cycle(
    beat: Beat, admin_principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies inside the admission (the server ends the session): the
    transaction rolls back, and the staged rows it held — unchanged, older than the
    load watermark — must go back into the heap, not be forgotten (the chaos suite
    lost two of 450 this way before)."""
    from django.db import connection

    jobs = [job_in(admin_principal, 2, name=f"j{i}") for i in range(3)]
    beat.cycle()
    assert all(str(e.id) in beat.in_heap for e in Execution.objects.filter(schedule__in=jobs))
    real_admit = beat.admission.admit
    calls = {"n": 0}

    def admit_on_a_dying_connection(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            # A real failure of the real connection, not a raised stand-in: the
            # server terminates this session, the admission's first statement fails.
            with connection.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return real_admit(*args, **kwargs)

    monkeypatch.setattr(beat.admission, "admit", admit_on_a_dying_connection)
    cycle_until([beat], lambda: calls["n"] >= 1)
    cycle_until([beat], lambda: all(queued(j) for j in jobs))
    assert calls["n"] >= 2
    assert Execution.objects.filter(schedule__in=jobs).count() == 3
