"""The beat's firing cycle, in-process against the real PostgreSQL and broker:
misfire and overlap policies, tenant limits, pauses, fencing, preview == fired."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

from core.redis_urls import redis_py_url
from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule, SchedulerPartition
from dispatch.scheduler.loop import Beat
from dispatch.timing import cron
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal
from tests.support.beat_support import partition_epochs
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def queue_len(name: str) -> int:
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return -1
    return int(redis.Redis.from_url(redis_py_url(settings.CELERY_BROKER_URL)).llen(name))


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "test-beat", "cycle_s": 0.2}


def this_minute_hourly() -> str:
    """An hourly cron at the current minute (UTC, the schedules' zone here).

    `due_from(s, now - 61 s)` then finds exactly one occurrence, the one at the start
    of this minute, and the next is an hour away: "exactly one execution" holds
    whatever second the test starts at. (A `* * * * *` schedule would need the test to
    wait clear of the next minute boundary, which a beat with a lookahead would plan.)
    """
    return f"{db_now().minute} * * * *"


def make(principal: Principal, **data: Any) -> Schedule:
    # A generous grace: "due a minute ago" must not turn into a misfire on a slow machine.
    body = {"name": data.pop("name", "s"), "target": TARGET, "misfire_grace_s": 600} | data
    return services.schedule_create(actor=principal, data=body)


def jobs_due_now(principal: Principal, count: int, prefix: str) -> list[Schedule]:
    """`count` one-off jobs due at once, named `{prefix}0`, `{prefix}1`, ..."""
    return [
        services.job_create(actor=principal, data={"target": TARGET, "name": f"{prefix}{i}"})[0]
        for i in range(count)
    ]


def due_from(schedule: Schedule, at: datetime) -> None:
    """Pretend the beat last fired this schedule long ago: next occurrence is the first after `at`."""
    nxt = cron.next_after(schedule.cron, schedule.timezone, after=at, seed=str(schedule.id))
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=nxt)


def test_due_cron_schedule_fires_one_execution_and_is_published(
    beat: Beat, admin_principal: Principal
) -> None:
    s = make(admin_principal, cron=this_minute_hourly(), jitter_s=0)
    due_from(s, db_now() - timedelta(seconds=61))
    beat.cycle()
    ex = Execution.objects.get(schedule=s)
    assert ex.trigger == "cron" and ex.fired_by == "test-beat" and ex.fired_epoch == 1
    assert ex.state == "queued" and ex.queue == "default.short" and ex.enqueued_at is not None
    assert queue_len("default.short") in (1, -1)
    s.refresh_from_db()
    assert s.next_run_at > ex.scheduled_for
    beat.cycle()
    assert Execution.objects.filter(schedule=s).count() == 1


@pytest.mark.parametrize(
    ("policy", "limit", "fired"), [("skip", 1, 0), ("run_once", 1, 1), ("catch_up", 3, 3)]
)
def test_three_hour_outage_follows_each_misfire_policy_exactly(
    beat: Beat, admin_principal: Principal, policy: str, limit: int, fired: int
) -> None:
    s = make(admin_principal, cron="*/15 * * * *", misfire=policy, catch_up_limit=limit)
    now = db_now()
    start = now.replace(minute=(now.minute // 15) * 15, second=0, microsecond=0) - timedelta(
        hours=3
    )
    Schedule.objects.filter(pk=s.pk).update(next_run_at=start)
    beat.cycle()
    rows = list(Execution.objects.filter(schedule=s).order_by("scheduled_for"))
    cutoff = now - timedelta(seconds=s.misfire_grace_s)
    expected_late = [
        start + timedelta(minutes=15 * i)
        for i in range(13)
        if start + timedelta(minutes=15 * i) < cutoff
    ]
    late = [r for r in rows if r.scheduled_for < cutoff]
    assert [r.scheduled_for for r in late] == expected_late  # every missed occurrence has a record
    late_fired = [r for r in late if r.state != "skipped"]
    assert [r.scheduled_for for r in late_fired] == expected_late[len(expected_late) - fired :]
    assert all(r.trigger == "catch_up" for r in late_fired)
    late_skipped = [r for r in late if r.state == "skipped"]
    assert len(late_skipped) == len(expected_late) - fired
    assert all(r.reason_code == "misfire" and policy in r.reason for r in late_skipped)
    s.refresh_from_db()
    assert s.next_run_at > now


def test_fired_occurrences_equal_the_preview(beat: Beat, admin_principal: Principal) -> None:
    s = make(
        admin_principal,
        cron="*/7 * * * *",
        timezone="America/New_York",
        misfire="catch_up",
        catch_up_limit=100,
        jitter_s=30,
    )
    now = db_now()
    start = now - timedelta(hours=2)
    due_from(s, start)
    first = Schedule.objects.get(pk=s.pk).next_run_at
    beat.cycle()
    fired = list(
        Execution.objects.filter(schedule=s)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "due_at")
    )
    preview = cron.preview(
        s.cron,
        s.timezone,
        seed=str(s.id),
        after=first - timedelta(microseconds=1),
        count=len(fired),
        jitter_s=30,
    )
    assert fired == [(o.scheduled_for, o.due_at) for o in preview]
    assert fired[-1][0] <= now + timedelta(seconds=5)


def test_overlap_forbid_skips_with_reason_and_replace_cancels_the_active_run(
    beat: Beat, admin_principal: Principal
) -> None:
    forbid = make(admin_principal, name="f", cron=this_minute_hourly(), concurrency="forbid")
    replace = make(admin_principal, name="r", cron=this_minute_hourly(), concurrency="replace")
    old = {}
    for s in (forbid, replace):
        old[s.name] = execution_row(
            s, db_now() - timedelta(minutes=5), state="running", fencing_token=4
        )
        due_from(s, db_now() - timedelta(seconds=61))
    beat.cycle()
    new_f = Execution.objects.exclude(pk=old["f"].pk).get(schedule=forbid)
    assert new_f.state == "skipped" and new_f.reason_code == "overlap_forbid"
    assert str(old["f"].pk) in new_f.reason and "still running" in new_f.reason
    old["r"].refresh_from_db()
    assert old["r"].state == "cancelled" and old["r"].fencing_token == 5
    new_r = Execution.objects.exclude(pk=old["r"].pk).get(schedule=replace)
    assert new_r.state == "queued"
    assert ExecutionEvent.objects.filter(execution=old["r"], kind="cancelled").exists()


def test_overlap_is_decided_when_the_occurrence_is_due_not_when_planned(
    beat: Beat, admin_principal: Principal
) -> None:
    """The lookahead plans an occurrence while the previous run is still running; the
    policy must look again at due time: forbid then runs it (the previous run has
    ended), replace cancels the previous run only if it is still running then."""
    due = db_now() + timedelta(seconds=2)
    runs = {}
    for policy in ("forbid", "replace"):
        s = make(admin_principal, name=policy, run_at=due + timedelta(hours=1), concurrency=policy)
        manual = services.schedule_trigger(actor=admin_principal, schedule_id=s.id)
        Execution.objects.filter(pk=manual.pk).update(state="running", fencing_token=1)
        Schedule.objects.filter(pk=s.pk).update(run_at=due, next_run_at=due)
        runs[policy] = (s, manual)
    beat.cycle()  # planned: within the 5 s lookahead, not yet due
    for s, manual in runs.values():
        planned = Execution.objects.exclude(pk=manual.pk).get(schedule=s)
        assert planned.state == "scheduled" and planned.reason_code == ""
        assert Execution.objects.get(pk=manual.pk).state == "running"
    forbid, forbid_manual = runs["forbid"]
    replace, replace_manual = runs["replace"]
    Execution.objects.filter(pk=forbid_manual.pk).update(state="succeeded", finished_at=db_now())

    def both_decided() -> bool:
        beat.cycle()
        return not Execution.objects.filter(
            schedule__in=[forbid, replace], scheduled_for=due, state="scheduled"
        ).exists()

    wait_for_cycles(both_decided)
    assert Execution.objects.get(schedule=forbid, scheduled_for=due).state == "queued"
    assert Execution.objects.get(schedule=replace, scheduled_for=due).state == "queued"
    replaced = Execution.objects.get(pk=replace_manual.pk)
    assert (replaced.state, replaced.reason_code, replaced.fencing_token) == (
        "cancelled",
        "replaced",
        2,
    )
    assert Execution.objects.get(pk=forbid_manual.pk).state == "succeeded"


def test_a_held_earlier_occurrence_is_a_previous_run(
    beat: Beat, admin_principal: Principal, tenant: Tenant
) -> None:
    """Two occurrences of one schedule due in the same batch while the tenant is at its
    cap: the older is held (waiting, still active), so forbid skips the newer naming
    it, and replace cancels the older in favour of the newer."""
    tenant.quota.max_concurrent = 1
    tenant.quota.save()
    busy = make(admin_principal, name="busy", cron="0 0 1 1 *", concurrency="allow")
    now = db_now()
    execution_row(busy, now, state="running")
    pairs = {}
    for policy in ("forbid", "replace"):
        s = make(admin_principal, name=policy, cron="0 0 1 1 *", concurrency=policy)
        pairs[policy] = [execution_row(s, now - timedelta(seconds=age)) for age in (2, 1)]
    beat.cycle()
    older, newer = (Execution.objects.get(pk=e.pk) for e in pairs["forbid"])
    assert (older.state, older.reason_code) == ("scheduled", "held_concurrency")
    assert older.reason == "waiting: tenant billing at its concurrency limit 1"
    assert (newer.state, newer.reason_code) == ("skipped", "overlap_forbid")
    assert newer.reason == f"skipped: previous run {older.pk} still scheduled (overlap forbid)"
    older, newer = (Execution.objects.get(pk=e.pk) for e in pairs["replace"])
    assert (older.state, older.reason_code) == ("cancelled", "replaced")
    assert (newer.state, newer.reason_code) == ("scheduled", "held_concurrency")


def test_manual_trigger_ignores_an_occurrence_planned_ahead(
    beat: Beat, admin_principal: Principal
) -> None:
    """A run-now within the lookahead of the next occurrence: that occurrence is not
    yet a run, so forbid does not skip the manual run and replace does not cancel it."""
    due = db_now() + timedelta(seconds=3)
    jobs = {
        policy: make(admin_principal, name=policy, run_at=due, concurrency=policy)
        for policy in ("forbid", "replace")
    }
    beat.cycle()  # planned, not yet due
    for policy, s in jobs.items():
        planned = Execution.objects.get(schedule=s)
        assert planned.state == "scheduled"
        manual = services.schedule_trigger(actor=admin_principal, schedule_id=s.id)
        assert (manual.state, manual.reason_code) == ("scheduled", ""), policy
        planned.refresh_from_db()
        assert planned.state == "scheduled", policy


def wait_for_cycles(predicate: Any, timeout: float = 15) -> None:

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_tenant_at_its_concurrency_limit_is_held_with_a_visible_reason(
    beat: Beat, admin_principal: Principal, tenant: Tenant
) -> None:
    tenant.quota.max_concurrent = 1
    tenant.quota.save()
    jobs = jobs_due_now(admin_principal, 3, "j")
    beat.cycle()
    states = sorted(Execution.objects.filter(schedule__in=jobs).values_list("state", flat=True))
    assert states == ["queued", "scheduled", "scheduled"]
    held = Execution.objects.filter(schedule__in=jobs, state="scheduled")
    assert all(h.reason == "waiting: tenant billing at its concurrency limit 1" for h in held)
    assert ExecutionEvent.objects.filter(kind="held_concurrency").count() == 2
    beat.cycle()  # still held; the reason is not written again
    assert ExecutionEvent.objects.filter(kind="held_concurrency").count() == 2
    Execution.objects.filter(schedule__in=jobs, state="queued").update(state="succeeded")
    beat.cycle()
    assert Execution.objects.filter(schedule__in=jobs, state="queued").count() == 1


def test_small_tenant_is_not_starved_when_capacity_is_short(
    beat: Beat, admin_principal: Principal, other_tenant: Tenant
) -> None:
    from tests.conftest import make_principal

    beat.cfg.max_inflight = 10
    small = make_principal(other_tenant)
    admin_principal.tenant.quota.max_concurrent = 1000
    admin_principal.tenant.quota.max_schedules = 1000
    admin_principal.tenant.quota.save()
    jobs_due_now(admin_principal, 40, "big")
    jobs_due_now(small, 3, "small")
    beat.cycle()
    queued = Execution.objects.filter(state="queued")
    assert queued.count() == 10
    assert queued.filter(tenant=other_tenant).count() == 3
    waiting = Execution.objects.filter(state="scheduled")
    assert all(w.reason == "waiting: platform at its dispatch capacity" for w in waiting)


def test_paused_schedule_is_not_fired_and_auto_resumes(
    beat: Beat, admin_principal: Principal
) -> None:
    s = make(admin_principal, cron=this_minute_hourly())
    services.schedule_pause(
        actor=admin_principal,
        schedule_id=s.id,
        reason="freeze",
        until=db_now() + timedelta(seconds=1),
    )
    due_from(s, db_now() - timedelta(seconds=61))
    beat.cycle()
    assert not Execution.objects.filter(schedule=s).exists()

    time.sleep(1.2)
    beat._last_sweep = 0
    beat.cycle()
    s.refresh_from_db()
    assert not s.paused
    assert ExecutionEvent.objects.filter(schedule=s, kind="resumed", actor="beat").exists()
    beat.cycle()
    assert Execution.objects.filter(schedule=s).count() == 1


def test_a_fenced_out_beat_writes_nothing(beat: Beat, admin_principal: Principal) -> None:
    beat.cycle()
    assert len(beat.owned) == settings.SCHEDULER_PARTITIONS
    s = make(admin_principal, cron=this_minute_hourly())
    due_from(s, db_now() - timedelta(seconds=61))
    # Another beat takes every partition over (as after our lease expired): epochs move on.
    SchedulerPartition.objects.update(owner="usurper", epoch=models_F("epoch") + 1)
    beat.fire_due()
    assert not Execution.objects.filter(schedule=s).exists()
    assert beat.owned == {}
    assert beat.counters.stale_writes_rejected == 1


def expired_run(principal: Principal) -> Execution:
    """A running execution whose worker's lease lapsed a minute ago (the worker died)."""
    ex = services.schedule_trigger(
        actor=principal, schedule_id=make(principal, cron="0 0 1 1 *").id
    )
    Execution.objects.filter(pk=ex.pk).update(
        state="running",
        fencing_token=1,
        lease_owner="gone:1",
        started_at=db_now() - timedelta(minutes=2),
        lease_expires_at=db_now() - timedelta(minutes=1),
    )
    return ex


def test_the_lease_sweep_writes_under_the_partition_fence(
    beat: Beat, admin_principal: Principal
) -> None:
    """The rescue of an expired lease commits in the transaction that share-locked its
    partition at our epoch, so no takeover can commit between the fence and the rescue:
    the swept row was written by the same transaction id that holds the partition lock."""
    beat.maintain_leases()
    ex = expired_run(admin_principal)
    assert beat.sweep() == 1
    ex.refresh_from_db()
    assert ex.state == "retry_scheduled" and ex.reason_code == "lease_expired"
    with connection.cursor() as cur:
        cur.execute(
            "SELECT e.xmin::text, p.xmax::text FROM dispatch_execution e "
            "JOIN dispatch_schedulerpartition p ON e.partition >= p.lo AND e.partition < p.hi "
            "WHERE e.id = %s",
            [ex.pk],
        )
        written_by, fenced_by = cur.fetchone()
    assert written_by == fenced_by


def test_a_fenced_out_beat_rescues_no_expired_lease(beat: Beat, admin_principal: Principal) -> None:
    beat.maintain_leases()
    ex = expired_run(admin_principal)
    SchedulerPartition.objects.update(owner="usurper", epoch=models_F("epoch") + 1)
    assert beat.sweep() == 0
    ex.refresh_from_db()
    assert ex.state == "running" and ex.fencing_token == 1
    assert beat.owned == {} and beat.counters.stale_writes_rejected == 1


def models_F(name: str) -> Any:
    from django.db.models import F

    return F(name)


def test_manual_trigger_is_published_at_once(beat: Beat, admin_principal: Principal) -> None:
    s = make(admin_principal, cron="0 0 1 1 *")
    ex = services.schedule_trigger(actor=admin_principal, schedule_id=s.id)
    beat.cycle()
    ex.refresh_from_db()
    assert ex.state == "queued" and ex.trigger == "manual"


def test_daily_quota_skips_the_excess_with_a_reason(
    beat: Beat, admin_principal: Principal, tenant: Tenant
) -> None:
    tenant.quota.max_executions_per_day = 2
    tenant.quota.save()
    jobs = jobs_due_now(admin_principal, 4, "q")
    beat.cycle()
    rows = list(Execution.objects.filter(schedule__in=jobs))
    assert sorted(r.state for r in rows) == ["queued", "queued", "skipped", "skipped"]
    skipped = [r for r in rows if r.state == "skipped"]
    assert all(
        r.reason_code == "quota_exhausted" and "daily quota of 2" in r.reason for r in skipped
    )
    assert ExecutionEvent.objects.filter(kind="quota_exhausted").count() == 2


def test_fair_share_is_exact_so_a_newcomer_always_gets_partitions(beat: Beat) -> None:
    # 16 partitions, 5 beats: rounded-up shares (4 each) would let four beats keep all 16.
    beat.cfg.partitions = 16
    names = ["beat-a", "beat-b", "beat-c", "beat-d"]
    shares = {}
    for name in [*names, "test-beat"]:
        beat.cfg.name = name
        shares[name] = beat._fair_share([*names, "test-beat"])
    assert sum(shares.values()) == 16 and max(shares.values()) - min(shares.values()) == 1
    beat.cfg.name = "test-beat"
    assert beat._fair_share([]) == 16  # alone (even if its own heartbeat lapsed during a pause)


def test_one_offs_fire_set_based_and_forbid_overlap_still_applies(
    beat: Beat, admin_principal: Principal
) -> None:
    """One-offs take the single-statement path (fired, fenced, advanced to nothing);
    a one-off whose forbid policy meets a manual run still in flight takes the
    planned path and is skipped with the reason."""
    run_at = db_now() - timedelta(seconds=2)
    plain = [
        make(admin_principal, name=f"j{i}", run_at=run_at, concurrency="allow") for i in range(5)
    ]
    forbid = make(
        admin_principal, name="jf", run_at=db_now() + timedelta(hours=1), concurrency="forbid"
    )
    manual = services.schedule_trigger(actor=admin_principal, schedule_id=forbid.id)
    Execution.objects.filter(pk=manual.pk).update(state="running")
    Schedule.objects.filter(pk=forbid.pk).update(run_at=run_at, next_run_at=run_at)

    beat.cycle()

    epochs = partition_epochs()
    for s in plain:
        ex = Execution.objects.get(schedule=s)
        assert (ex.state, ex.trigger, ex.attempt) == ("queued", "api", 1)
        assert ex.scheduled_for == ex.due_at == run_at
        assert ex.fired_by == "test-beat" and ex.fired_epoch == epochs[s.partition]
        s.refresh_from_db()
        assert s.next_run_at is None
    skipped = Execution.objects.exclude(pk=manual.pk).get(schedule=forbid)
    assert skipped.state == "skipped" and skipped.reason_code == "overlap_forbid"
    assert str(manual.pk) in skipped.reason
    beat.cycle()  # nothing is fired twice
    assert Execution.objects.filter(schedule__in=[*plain, forbid]).count() == 7


def test_publish_time_is_recorded_even_when_a_worker_claimed_first(
    beat: Beat, admin_principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer can claim a message while the beat still awaits the publish (RabbitMQ
    confirms make that window wide): the row was admitted — queued, enqueued_at
    written — before the message existed, so fire-lag figures keep the fastest
    starts and nothing written after the publish can clobber the claim."""
    job = make(admin_principal, name="fast", run_at=db_now() - timedelta(seconds=1))
    publish = beat.publish_items

    def publish_then_claimed(items: list[Any]) -> list[Any]:
        sent = publish(items)
        Execution.objects.filter(schedule=job).update(state="running", fencing_token=1)
        return sent

    monkeypatch.setattr(beat, "publish_items", publish_then_claimed)
    beat.cycle()
    ex = Execution.objects.get(schedule=job)
    assert ex.state == "running" and ex.enqueued_at is not None


def test_auto_resume_writes_an_audit_row_like_a_resume(
    beat: Beat, admin_principal: Principal
) -> None:
    s = make(admin_principal, cron=this_minute_hourly())
    services.schedule_pause(
        actor=admin_principal,
        schedule_id=s.id,
        reason="freeze",
        until=db_now() + timedelta(hours=1),
    )
    # The pause's end has passed (the service refuses an end in the past, so set it here).
    ended = db_now() - timedelta(seconds=1)
    Schedule.objects.filter(pk=s.pk).update(paused_until=ended)
    beat._last_sweep = 0
    beat.cycle()
    s.refresh_from_db()
    assert not s.paused
    row = AuditEvent.objects.filter(object_id=str(s.id)).order_by("id").last()
    assert row is not None and row.action == "schedule.resume"
    assert row.actor_kind == "system" and row.actor_label == "beat"
    assert row.tenant_id == s.tenant_id
    assert row.before["paused"] is True and row.after["paused"] is False
    assert row.before["paused_until"] == ended.isoformat()
    assert row.after["version"] == s.version == row.before["version"] + 1
