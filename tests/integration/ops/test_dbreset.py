"""The quick reset between transactional tests (tests/support/dbreset.py) leaves what
Django's flush leaves: every table empty, the content types and permissions in place."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import TransactionTestCase
from django.utils import timezone

from dispatch import services
from dispatch.models import Execution, Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal
from tests.support import dbreset
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def row_counts() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cur:
        for table in connection.introspection.django_table_names(only_existing=True):
            cur.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")  # noqa: S608
            counts[table] = cur.fetchone()[0]
    return counts


def some_rows(principal: Principal) -> None:
    """A tenant, a schedule, an execution and audit rows (append-only: DELETE is refused)."""
    schedule = services.schedule_create(
        actor=principal, data={"name": "s", "cron": "0 9 * * *", "target": TARGET}
    )
    execution_row(schedule, timezone.now() - timedelta(days=1))
    assert AuditEvent.objects.exists() and Execution.objects.exists()


def test_the_session_uses_the_quick_reset() -> None:
    assert getattr(TransactionTestCase, "_fixture_teardown") is dbreset._fixture_teardown  # noqa: B009


def test_every_table_is_emptied_but_content_types_and_permissions(
    admin_principal: Principal, tenant: Tenant
) -> None:
    some_rows(admin_principal)
    kinds, perms = ContentType.objects.count(), Permission.objects.count()
    assert dbreset.empty_tables("default") is True
    left = {t: n for t, n in row_counts().items() if n}
    assert set(left) == dbreset.KEPT, left
    assert (ContentType.objects.count(), Permission.objects.count()) == (kinds, perms)
    assert not Schedule.objects.exists() and not Tenant.objects.exists()


def test_a_table_over_the_delete_limit_is_left_to_djangos_flush(
    admin_principal: Principal, tenant: Tenant, monkeypatch: Any
) -> None:
    some_rows(admin_principal)
    before = row_counts()
    monkeypatch.setattr(dbreset, "DELETE_MAX_ROWS", 0)
    assert dbreset.empty_tables("default") is False
    assert row_counts() == before  # nothing done: the caller flushes


def test_a_permission_a_test_removed_is_created_again(
    admin_principal: Principal, tenant: Tenant
) -> None:
    some_rows(admin_principal)
    assert dbreset.reset("default") is True  # post_migrate has run since the counts were taken
    Permission.objects.filter(codename="view_tenant").delete()
    assert dbreset.reset("default") is True
    assert Permission.objects.filter(codename="view_tenant").exists()
    assert not Tenant.objects.exists()


# The events' files: the partitioned table has none of its own, its day partitions do.
SIZE = "SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('dispatch_executionevent')"


def test_a_table_with_enough_dead_rows_is_vacuumed_back_to_empty(
    admin_principal: Principal, tenant: Tenant, monkeypatch: Any
) -> None:
    """Without autovacuum the deleted rows would stay in the table's file for the rest
    of the suite; the reset's VACUUM gives an emptied table's pages back."""
    some_rows(admin_principal)
    schedule = Schedule.objects.get()
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO dispatch_executionevent (schedule_id, tenant_id, kind, message, data, actor)"
            " SELECT %s, %s, 'claimed', repeat('x', 200), '{}'::jsonb, ''"
            " FROM generate_series(1, 3000)",
            [schedule.pk, schedule.tenant_id],
        )
        cur.execute(SIZE)
        assert cur.fetchone()[0] > 0
    monkeypatch.setattr(dbreset, "_dead", {})
    assert dbreset.reset("default") is True
    with connection.cursor() as cur:
        cur.execute(SIZE)
        assert cur.fetchone()[0] == 0  # vacuumed: the emptied files truncated
    assert "dispatch_executionevent" not in dbreset._dead.get("default", {})
    # A table with a few dead rows (the one schedule) waits for more.
    assert 0 < dbreset._dead["default"]["dispatch_schedule"] < dbreset.VACUUM_AFTER_ROWS
