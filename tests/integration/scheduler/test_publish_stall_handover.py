"""A beat that cannot publish hands its partitions over (issue 32, item 5): two real
beat processes and a real Celery worker calling the test's ledger; the victim beat
reaches the broker (Redis, or RabbitMQ) through a fault proxy of the test's own,
black-holed — connections kept, nothing forwarded, nothing refused.

Idle, the victim keeps its partitions: nothing is due, so nothing is late. Once work
falls due in its partitions it publishes nothing for BEAT_PUBLISH_STALL_S (1 s here;
its first attempt waits out the broker's I/O bound) and hands every partition over;
the healthy beat takes them at new epochs and every occurrence runs exactly once
*while the victim's link is still black-holed* — without the hand-over nothing of its
partitions could run before the heal, and the rows it had admitted would wait for
QUEUED_REPUBLISH_S (60 s, the default, kept here). Healed, the victim takes part again
after its cool-off. Alone, a stalled beat has nobody to hand over to: it keeps its
partitions, and what fell due runs once its link heals.

The figure (how late the victim's partitions' effects are with a 35 s black-hole and
the default settings) is the chaos suite's (tests/chaos/README.md,
`beat_broker_blackhole`), not asserted here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import transaction

from dispatch import services
from dispatch.models import BeatNode, Execution, Schedule, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal
from tests.integration.scheduler.test_beat_processes import (
    assert_no_epoch_shared_by_two_beats,
    owners,
    purge,
)
from tests.support.beat_support import covered_by, running_beat
from tests.support.faultproxy import FaultProxy
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, wait_for
from tests.support.worker_support import QUEUES, db_now, worker_processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TTL = 3.0
STALL_S = 1.0
COOLOFF_S = 3.0
JOBS = 24
RETRY = {"max_attempts": 3, "backoff": "fixed", "initial_s": 1, "max_s": 1}
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@dataclass
class Platform:
    broker: str  # the real broker, as the healthy beat and the worker reach it
    proxy: FaultProxy  # in front of it, for the victim only
    through_proxy: str
    ledger: Ledger
    start: Callable[..., Proc]

    def beat(self, name: str, broker: str) -> Proc:
        return self.start(
            name,
            beat_cmd("--name", name, "--lease-ttl", str(TTL), "--cycle", "0.2", "--lookahead", "2"),
            CELERY_BROKER_URL=broker,
            SWEEP_INTERVAL_S="0.5",
            BEAT_PUBLISH_STALL_S=str(STALL_S),
            BEAT_PUBLISH_COOLOFF_S=str(COOLOFF_S),
        )


@pytest.fixture(params=["redis", "rabbitmq"])
def platform(
    request: pytest.FixtureRequest, tmp_path: Path, ledger: Ledger, start: Callable[..., Proc]
) -> Iterator[Platform]:
    """The broker, the proxy in front of it, a worker calling `ledger`; beats by `beat()`."""
    broker = (
        settings.CELERY_BROKER_URL
        if request.param == "redis"
        else os.environ.get("RABBITMQ_URL", "")
    )
    if not broker:
        pytest.skip("RABBITMQ_URL not set")
    url = urlsplit(broker)
    assert url.hostname and url.port, broker
    purge(broker)
    with FaultProxy((url.hostname, url.port)) as proxy, worker_processes(tmp_path) as workers:
        creds = url.netloc.rpartition("@")[0]
        through = urlunsplit(
            url._replace(netloc=f"{creds}@{proxy.address}" if creds else proxy.address)
        )
        workers(
            "worker",
            queues=",".join(QUEUES),
            concurrency=4,
            CELERY_BROKER_URL=broker,
            TARGET_TEST_ALLOW=ledger.allow_entry,
        )
        yield Platform(broker, proxy, through, ledger, start)
    purge(broker)


def jobs_to(
    principal: Principal, tenant: Tenant, url: str, *, count: int, first_s: float, spread_s: float
) -> list[Schedule]:
    """One-off jobs calling `url`, due from `first_s` to `first_s + spread_s` from now."""
    tenant.quota.max_schedules = count + 10
    tenant.quota.max_concurrent = count + 10
    tenant.quota.save()
    base = db_now() + timedelta(seconds=first_s)
    jobs = []
    for i in range(count):
        # Saved with a placeholder (the loopback ledger cannot pass the save-time SSRF
        # check) and repointed in the same transaction, before any beat can stage it.
        with transaction.atomic():
            job, _ = services.job_create(
                actor=principal,
                data={
                    "name": f"stall-{i}",
                    "run_at": base + timedelta(seconds=spread_s * i / max(1, count - 1)),
                    "target": {"type": "http", "url": "https://billing.internal/hook"},
                    "retry": RETRY,
                },
            )
            Schedule.objects.filter(pk=job.pk).update(
                target={"type": "http", "url": url, "method": "POST", "timeout_s": 10}
            )
        job.refresh_from_db()
        jobs.append(job)
    return jobs


def succeeded(jobs: list[Schedule]) -> bool:
    return Execution.objects.filter(schedule__in=jobs, state="succeeded").count() == len(jobs)


def epochs_of(numbers: list[int]) -> dict[int, int]:
    return dict(
        SchedulerPartition.objects.filter(number__in=numbers).values_list("number", "epoch")
    )


def deliveries(ledger: Ledger, jobs: list[Schedule]) -> dict[str, int]:
    """Calls the ledger received per execution of these jobs."""
    ids = {str(e) for e in Execution.objects.filter(schedule__in=jobs).values_list("id", flat=True)}
    counts = {eid: 0 for eid in ids}
    for req in list(ledger.requests):
        eid = {k.lower(): v for k, v in req["headers"].items()}.get("x-execution-id", "")
        if eid in counts:
            counts[eid] += 1
    return counts


def test_a_beat_that_cannot_publish_hands_its_partitions_to_a_healthy_beat(
    platform: Platform, admin_principal: Principal, tenant: Tenant
) -> None:
    healthy = platform.beat("beat-ok", platform.broker)
    victim = platform.beat("beat-victim", platform.through_proxy)
    half = settings.SCHEDULER_PARTITIONS // 2
    wait_for(lambda: owners() == {"beat-ok": half, "beat-victim": half}, timeout=30, what="a split")
    theirs = sorted(
        SchedulerPartition.objects.filter(owner="beat-victim").values_list("number", flat=True)
    )
    granted = epochs_of(theirs)

    # Idle with a dead broker: nothing is due, so nothing is late — it keeps them.
    platform.proxy.blackhole()
    idle_until = db_now() + timedelta(seconds=STALL_S * 4)
    wait_for(lambda: db_now() > idle_until, timeout=30, what="four stall bounds to pass")
    assert owners() == {"beat-ok": half, "beat-victim": half}
    assert epochs_of(theirs) == granted
    assert BeatNode.objects.get(name="beat-victim").handovers_total == 0

    # Work falls due in every partition, the victim's included, its link still dead.
    jobs = jobs_to(
        admin_principal, tenant, f"{platform.ledger.url}/effect", count=JOBS, first_s=1, spread_s=5
    )
    theirs_covers = covered_by(theirs)
    in_theirs = [j for j in jobs if j.partition in theirs_covers]
    assert in_theirs, "no job landed in the victim's partitions"

    def context() -> str:
        return f"{victim.output()[-4000:]}\n--- healthy\n{healthy.output()[-3000:]}"

    # Everything runs while the victim's link is black-holed: only a hand-over can do that.
    wait_for(lambda: succeeded(jobs), timeout=60, what="every job to succeed, link still dead")
    assert platform.proxy.mode == "blackhole"
    node = BeatNode.objects.get(name="beat-victim")
    assert node.standby_since is not None and node.handovers_total == 1, context()
    taken = SchedulerPartition.objects.filter(number__in=theirs)
    assert all(p.owner == "beat-ok" and p.epoch > granted[p.number] for p in taken), context()
    assert node.stale_writes_rejected == 0, context()  # released, not fenced out
    # What it had admitted but could not publish was handed back and published by the
    # healthy beat at once (QUEUED_REPUBLISH_S is 60 s): "published again".
    handed_back = Execution.objects.filter(schedule__in=in_theirs, republished_at__isnull=False)
    assert handed_back.exists(), context()
    assert "handed partitions" in victim.output()

    # Healed, it takes part again after its cool-off; the split is even again.
    platform.proxy.pass_()
    wait_for(
        lambda: owners() == {"beat-ok": half, "beat-victim": half},
        timeout=COOLOFF_S + 30,
        what="the victim taking part again",
    )
    assert BeatNode.objects.get(name="beat-victim").standby_since is None
    assert "takes part again" in victim.output()
    # Exactly once: one record each (the constraint), one call each at the ledger — the
    # victim's message held in the proxy reached the broker at the heal and claimed nothing.
    wait_for(
        lambda: not Execution.objects.filter(schedule__in=jobs).exclude(state="succeeded"),
        timeout=10,
        what="nothing re-run after the heal",
    )
    assert Execution.objects.filter(schedule__in=jobs).count() == len(jobs)
    calls = deliveries(platform.ledger, jobs)
    assert calls and set(calls.values()) == {1}, calls
    assert_no_epoch_shared_by_two_beats()


def test_a_lone_beat_that_cannot_publish_keeps_its_partitions(
    platform: Platform, admin_principal: Principal, tenant: Tenant
) -> None:
    victim = platform.beat("beat-alone", platform.through_proxy)
    every = settings.SCHEDULER_PARTITIONS
    wait_for(lambda: owners() == {"beat-alone": every}, timeout=30, what="it owning every one")
    granted = epochs_of(list(range(every)))
    platform.proxy.blackhole()
    jobs = jobs_to(
        admin_principal, tenant, f"{platform.ledger.url}/effect", count=6, first_s=1, spread_s=2
    )
    # It found nobody to take them: it keeps them (and would ask again a stall later).
    wait_for(lambda: "keeping them" in victim.output(), timeout=30, what="the refused hand-over")
    assert owners() == {"beat-alone": every}
    assert epochs_of(list(range(every))) == granted
    node = BeatNode.objects.get(name="beat-alone")
    assert node.standby_since is None and node.handovers_total == 0
    assert not Execution.objects.filter(schedule__in=jobs, state="succeeded").exists()
    # Healed: what fell due meanwhile goes out, once each.
    platform.proxy.pass_()
    wait_for(lambda: succeeded(jobs), timeout=60, what="every job to succeed after the heal")
    calls = deliveries(platform.ledger, jobs)
    assert calls and set(calls.values()) == {1}, calls


@pytest.fixture
def proxied_rabbitmq(settings: Any) -> Iterator[FaultProxy]:
    """The in-process beat's RabbitMQ through a fault proxy (its AMQP publisher connects
    to settings.CELERY_BROKER_URL; Redis publishes go through the Celery app's pool)."""
    broker = os.environ.get("RABBITMQ_URL", "")
    if not broker:
        pytest.skip("RABBITMQ_URL not set")
    url = urlsplit(broker)
    assert url.hostname and url.port, broker
    purge(broker)
    with FaultProxy((url.hostname, url.port)) as proxy:
        creds = url.netloc.rpartition("@")[0]
        settings.CELERY_BROKER_URL = urlunsplit(
            url._replace(netloc=f"{creds}@{proxy.address}" if creds else proxy.address)
        )
        yield proxy
        proxy.pass_()  # connections accepted while black-holed finish before it closes
    purge(broker)


@pytest.fixture
def ghost(db: Any) -> BeatNode:
    """A beat that heartbeats (its heartbeat an hour ahead: live throughout) but never
    takes a partition, as one running code from before the hand-over would."""
    return BeatNode.objects.create(name="beat-ghost", heartbeat_at=db_now() + timedelta(hours=1))


def due_in(principal: Principal, partitions: list[int]) -> list[Schedule]:
    """One-off jobs due now, until one lands in one of the ranges `partitions`."""
    jobs: list[Schedule] = []
    covered = covered_by(partitions)
    while not any(j.partition in covered for j in jobs):
        data = {"name": f"due-{len(jobs)}", "target": TARGET}
        jobs.append(services.job_create(actor=principal, data=data)[0])
    return jobs


def test_a_beat_failing_to_publish_is_no_taker(
    proxied_rabbitmq: FaultProxy, ghost: BeatNode, admin_principal: Principal
) -> None:
    """In-process: the other live beat's heartbeat says its publishes are failing too (the
    broker down for both), so the stalled beat keeps its partitions; once that beat can
    publish again, the next ask (a stall bound later) hands them over."""
    BeatNode.objects.filter(pk=ghost.pk).update(publish_failing=True)
    with running_beat("beat-a", lease_ttl_s=TTL, publish_stall_s=0.5) as beat:
        beat.maintain_leases()
        mine = sorted(beat.owned)
        granted = epochs_of(mine)
        due_in(admin_principal, mine)
        proxied_rabbitmq.blackhole()
        beat.cycle()  # admits, the publish times out (1 s I/O bound): stalled, no taker
        assert beat.stall.failing and not beat.stall.standby
        assert sorted(beat.owned) == mine and epochs_of(mine) == granted
        assert BeatNode.objects.get(name="beat-a").handovers_total == 0
        BeatNode.objects.filter(pk=ghost.pk).update(publish_failing=False)
        beat.cycle()  # the owed messages time out again, a stall bound after the refusal
        assert beat.stall.standby and beat.owned == {}
        assert BeatNode.objects.get(name="beat-a").handovers_total == 1


def test_a_hand_over_nobody_takes_is_taken_back_a_lease_later(
    proxied_rabbitmq: FaultProxy, ghost: BeatNode, admin_principal: Principal
) -> None:
    """The database's side of a hand-over, in-process: the beat stands by only beside a
    live beat taking part — here one that heartbeats but takes nothing — hands back what
    it admitted unpublished, and takes its partitions back once they are still untaken a
    lease later, long before its cool-off would have it probe the broker."""
    with running_beat(
        "beat-a", lease_ttl_s=TTL, publish_stall_s=0.5, publish_cooloff_s=600
    ) as beat:
        beat.maintain_leases()
        mine = sorted(beat.owned)
        assert len(mine) == settings.SCHEDULER_PARTITIONS // 2  # the ghost counts as live
        granted = epochs_of(mine)
        jobs = due_in(admin_principal, mine)
        proxied_rabbitmq.blackhole()
        beat.cycle()  # fires, admits, publish times out (1 s I/O bound): stalled, hands over
        node = BeatNode.objects.get(name="beat-a")
        assert node.standby_since is not None and node.handovers_total == 1
        assert beat.owned == {} and beat.stall.standby
        ours = Execution.objects.filter(schedule__in=jobs, partition__in=covered_by(mine))
        # Admitted, never published: handed back, owed at once to the next owner.
        assert ours.filter(state="queued", published_at__isnull=True).exists()
        assert not SchedulerPartition.objects.filter(number__in=mine).exclude(owner="")
        beat.cycle()  # standing by: the ghost may still take them
        assert beat.stall.standby and beat.owned == {}
        lease_later = db_now() + timedelta(seconds=TTL)
        wait_for(lambda: db_now() > lease_later, timeout=30, what="a lease to pass")
        beat.cycle()  # still untaken: it takes part again
        assert not beat.stall.standby
        assert BeatNode.objects.get(name="beat-a").standby_since is None
        beat.cycle()
        assert sorted(beat.owned) == mine
        assert all(epochs_of(mine)[n] > granted[n] for n in mine)
