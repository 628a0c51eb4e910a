"""Admission grants: the slots a beat takes under a capped tenant's quota row before it
admits a chunk without holding that row (dispatch/scheduler/admission.py). A grant
counts as taken for every other admitter and for a manual trigger while the range it
names is still its beat's at the epoch it named, and stops counting when that range is
taken over; a beat that dies holding one leaks its slots only until then."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from dispatch import selectors
from dispatch.models import AdmissionGrant, Execution, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.integration.scheduler.test_beat_admission import (  # noqa: F401 - the fixture
    Gauge,
    all_succeeded,
    cluster,
    schedule_to,
)
from tests.support.beat_support import partition_owners
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import db_now

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def _range(number: int, owner: str, epoch: int) -> SchedulerPartition:
    SchedulerPartition.objects.filter(number=number).delete()
    return SchedulerPartition.objects.create(
        number=number,
        owner=owner,
        epoch=epoch,
        lease_expires_at=db_now() + timedelta(seconds=30),
        lo=number,
        hi=number + 1,
    )


def _slots(tenant: Tenant, beat: str = "") -> selectors.TenantSlots:
    (row,) = selectors.tenant_slots(tenant_ids=[tenant.pk], beat=beat)
    return row


@pytest.mark.django_db
def test_a_grant_counts_while_its_range_is_its_beats_at_its_epoch(tenant: Tenant) -> None:
    tenant.quota.max_concurrent = 5
    tenant.quota.save()
    held = _range(0, "beat-a", 3)
    AdmissionGrant.objects.create(
        beat="beat-a", tenant_id=tenant.pk, range_number=0, epoch=3, slots=2
    )
    assert (_slots(tenant).granted, _slots(tenant).free) == (2, 3)
    # The beat's own grant is replaced by the transaction reading it: not counted there.
    assert _slots(tenant, beat="beat-a").granted == 0
    # A takeover (a new epoch) ends it; so does a release (no owner).
    SchedulerPartition.objects.filter(pk=held.pk).update(epoch=4, owner="beat-b")
    assert (_slots(tenant).granted, _slots(tenant).free) == (0, 5)
    SchedulerPartition.objects.filter(pk=held.pk).update(epoch=3, owner="")
    assert _slots(tenant).granted == 0
    SchedulerPartition.objects.filter(pk=held.pk).update(owner="beat-a")
    assert _slots(tenant).granted == 2


@pytest.mark.django_db
def test_a_manual_trigger_counts_the_beats_grants(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    """Cap 2, nothing in flight, a beat holding both slots for the chunk it is admitting:
    a trigger is refused as at the limit, and accepted once the grant is given up."""
    tenant.quota.max_concurrent = 2
    tenant.quota.save()
    owner = api_for(tenant, Role.OPERATOR)
    sid = owner.post(
        "/v1/schedules", {"name": "t", "cron": "0 0 1 1 *", "target": TARGET}, format="json"
    ).json()["id"]
    _range(0, "beat-a", 1)
    AdmissionGrant.objects.create(
        beat="beat-a", tenant_id=tenant.pk, range_number=0, epoch=1, slots=2
    )
    refused = owner.post(f"/v1/schedules/{sid}:trigger")
    assert refused.status_code == 429, refused.json()
    assert refused.json()["error"]["message"] == (
        f"tenant {tenant.slug} is at its concurrency limit 2; retry later"
    )
    AdmissionGrant.objects.filter(beat="beat-a").delete()
    accepted = owner.post(f"/v1/schedules/{sid}:trigger")
    assert accepted.status_code == 202, accepted.json()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_beat_dying_between_grant_and_admission_holds_its_slots_until_takeover(
    cluster: Callable[..., list[Proc]],  # noqa: F811 - the fixture imported above
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
) -> None:
    """Cap 2, two beats, four jobs on the first beat's partitions: it takes the two slots
    as a grant and dies before admitting. Nothing is queued or published, the grant is
    left behind and still counts (its range is still the dead beat's). The other beat
    takes the range over (a new epoch), the grant stops counting, and all four run,
    never more than two at once."""
    gauge = Gauge(lambda req: 1.0)
    ledger.respond = gauge
    tenant.quota.max_concurrent = 2
    tenant.quota.save()
    (crashing,) = cluster(1, SCHED_FAULT_POINT="after_grant")
    cluster(1)
    wait_for(
        lambda: set(partition_owners().values()) == {crashing.name, "beat-1"},
        timeout=30,
        what="two beats sharing the partitions",
    )
    time.sleep(2)  # each beat's keeper has seen the other live: grants are taken
    mine = min(p for p, owner in partition_owners().items() if owner == crashing.name)
    at = db_now() + timedelta(seconds=1)
    ids = [
        str(schedule_to(admin_principal, ledger.url, name=f"g{i}", run_at=at, partition=mine).pk)
        for i in range(4)
    ]
    wait_for(lambda: not crashing.alive(), timeout=20, what="the beat to die after its grant")
    assert crashing.proc.returncode == 137
    left = list(AdmissionGrant.objects.values_list("beat", "tenant_id", "slots"))
    assert left == [(crashing.name, tenant.pk, 2)]
    states = set(Execution.objects.filter(schedule_id__in=ids).values_list("state", flat=True))
    assert states == {"scheduled"}
    assert ledger.requests == []
    wait_for(lambda: all_succeeded(ids), timeout=40, what="all four jobs to succeed")
    assert gauge.peak == 2, gauge.peak
    assert sorted(ledger.effects.values()) == [1] * 4
    # The dead beat's grant stopped counting with the takeover (its row goes at the next
    # grant taken for the tenant); the live beat holds none after its admissions.
    assert _slots(tenant).granted == 0
    assert not AdmissionGrant.objects.exclude(beat=crashing.name).exists()
