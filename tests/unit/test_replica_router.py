"""The replica router's rules (core/replicas.py): only the scheduling tables, only inside a
request that chose the replica; writes and migrations never. The whole path — a real
standby, its lag, the pages — is tests/integration/ops/test_replica_reads.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session

from core.replicas import REPLICA, ReadSource, ReplicaRouter, reading_from, reads
from dispatch.models import Execution, ExecutionEvent, Schedule, SchedulerPartition
from tenants.models import AuditEvent, Membership, ServiceToken, Tenant, TenantQuota

ROUTED = [Schedule, Execution, ExecutionEvent, SchedulerPartition]
NEVER = [User, Session, Tenant, TenantQuota, Membership, ServiceToken, AuditEvent]
router = ReplicaRouter()
ON_REPLICA = ReadSource(REPLICA, 0.5, 10, "the replica is 0.5 s behind the primary")
ON_PRIMARY = ReadSource("default", 12.0, 10, "the replica is 12.0 s behind the primary")


@pytest.mark.parametrize("model", ROUTED + NEVER)
def test_outside_a_marked_request_every_read_goes_to_the_primary(model: type) -> None:
    assert router.db_for_read(model) is None
    assert reads() == "default"


@pytest.mark.parametrize("model", ROUTED)
def test_scheduling_reads_go_to_the_replica_only_when_the_request_chose_it(model: type) -> None:
    with reading_from(ON_REPLICA):
        assert router.db_for_read(model) == REPLICA
        assert reads() == REPLICA
        assert router.db_for_write(model) == "default"
    with reading_from(ON_PRIMARY):
        assert router.db_for_read(model) is None
        assert reads() == "default"
    assert router.db_for_read(model) is None


@pytest.mark.parametrize("model", NEVER)
def test_auth_sessions_tenants_and_audit_never_read_the_replica(model: type) -> None:
    with reading_from(ON_REPLICA):
        assert router.db_for_read(model) is None
        assert router.db_for_write(model) == "default"


def test_nothing_is_migrated_on_the_replica() -> None:
    assert router.allow_migrate(REPLICA, "dispatch") is False
    assert router.allow_migrate("default", "dispatch") is True


def test_the_header_says_where_and_how_far_behind() -> None:
    assert ON_REPLICA.header() == "replica; lag=0.5; bound=10"
    assert ON_PRIMARY.header() == "primary; lag=12.0; bound=10"
    gone = ReadSource("default", None, 10, "the replica did not answer")
    assert gone.header() == "primary; bound=10"
