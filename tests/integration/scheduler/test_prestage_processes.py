"""Pre-staged firing with a real beat process: schedules paused while the beat admits
their staged occurrences at the due instant. The row locks decide each one: admitted
first (then published, and the pause leaves it alone) or withdrawn first (then never
published, and the schedule's next_run_at points back at it). Nothing withdrawn is
published and nothing is lost: resuming fires every withdrawn occurrence once."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.conf import settings

from dispatch import services
from dispatch.models import Execution, Schedule, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal
from tests.integration.scheduler.test_beat_processes import drain, purge
from tests.support.procs import Proc, beat_cmd, wait_for
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
COUNT = 100


def test_pauses_racing_the_admission_publish_nothing_withdrawn_and_lose_nothing(
    start: Callable[..., Proc], admin_principal: Principal, tenant: Tenant
) -> None:
    broker = settings.CELERY_BROKER_URL
    purge(broker)
    tenant.quota.max_schedules = COUNT + 10
    tenant.quota.max_concurrent = COUNT + 10
    tenant.quota.save()
    start(
        "beat-stage",
        beat_cmd("--name", "beat-stage", "--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "60"),
        CELERY_BROKER_URL=broker,
    )
    wait_for(
        lambda: (
            SchedulerPartition.objects.filter(owner="beat-stage").count()
            == settings.SCHEDULER_PARTITIONS
        ),
        timeout=30,
        what="the beat owning every partition",
    )
    # Far enough ahead for the jobs to be created and staged on a loaded machine.
    due = db_now() + timedelta(seconds=30)
    jobs = [
        services.job_create(
            actor=admin_principal, data={"target": TARGET, "name": f"j{i}", "run_at": due}
        )[0]
        for i in range(COUNT)
    ]
    created = db_now()
    wait_for(
        lambda: Execution.objects.filter(schedule__in=jobs).count() == COUNT,
        timeout=30,
        what="every occurrence staged before it is due",
    )
    assert db_now() < due, (created, due)
    # Every other job is paused one by one across the due instant, racing the admission.
    paused = jobs[::2]
    while db_now() < due - timedelta(seconds=0.3):
        time.sleep(0.05)
    for job in paused:
        services.schedule_pause(actor=admin_principal, schedule_id=job.id)
    running = [j for j in jobs if j not in paused]
    wait_for(
        lambda: (
            Execution.objects.filter(schedule__in=running, state="queued").count() == len(running)
        ),
        timeout=30,
        what="the unpaused jobs queued",
    )
    time.sleep(1)  # what was admitted before its pause is published too
    messages = {m[0] for m in drain(broker)}
    rows = {str(e.id): e for e in Execution.objects.filter(schedule__in=jobs)}
    # Every message is a live queued row: nothing withdrawn was published.
    assert messages <= set(rows) and all(rows[m].state == "queued" for m in messages)
    assert {i for i, e in rows.items() if e.state == "queued"} == messages
    won, withdrawn = 0, []
    for job in paused:
        job.refresh_from_db()
        mine = [e for e in rows.values() if e.schedule_id == job.id]
        if mine:  # admitted before the pause: published, and the pause let it be
            assert [e.state for e in mine] == ["queued"]
            won += 1
        else:  # withdrawn: the schedule points back at it, for resume to decide
            assert job.next_run_at == due
            withdrawn.append(job)
    for job in withdrawn:
        services.schedule_resume(actor=admin_principal, schedule_id=job.id)
    wait_for(
        lambda: Execution.objects.filter(schedule__in=jobs, state="queued").count() == COUNT,
        timeout=30,
        what="every occurrence queued after the resume",
    )
    time.sleep(1)
    messages |= {m[0] for m in drain(broker)}
    final = Execution.objects.filter(schedule__in=jobs)
    assert final.count() == COUNT
    assert messages == {str(e.id) for e in final}
    assert Schedule.objects.filter(id__in=[j.id for j in withdrawn], paused=True).count() == 0
    # Both outcomes of the race happened or the test proved only one: say which.
    print(f"admitted before the pause: {won}, withdrawn: {len(withdrawn)}")
