"""Unique-constraint violations are mapped from the constraint PostgreSQL names
(psycopg's `diag.constraint_name`), never from text found in the error message."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, transaction

from core.errors import AppError, constraint_name
from dispatch import services
from dispatch.exceptions import DispatchError, InvalidSchedule
from dispatch.models import Schedule
from dispatch.partitioning import partition_for
from tenants.exceptions import TenantsError
from tenants.models import Tenant

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def _schedule(tenant: Tenant, name: str, **fields: object) -> Schedule:
    sid = fields.pop("id", None) or uuid.uuid4()
    return Schedule(
        id=sid,
        tenant=tenant,
        partition=partition_for(sid),  # type: ignore[arg-type]
        name=name,
        kind="cron",
        cron="0 0 * * *",
        target=TARGET,
        **fields,
    )


def test_both_apps_errors_share_the_one_base() -> None:
    assert issubclass(DispatchError, AppError) and issubclass(TenantsError, AppError)


@pytest.mark.django_db
def test_constraint_name_comes_from_the_database_diagnostics(tenant: Tenant) -> None:
    _schedule(tenant, "nightly").save(force_insert=True)
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        _schedule(tenant, "nightly").save(force_insert=True)
    assert constraint_name(caught.value) == "schedule_name_unique_live"
    assert constraint_name(IntegrityError("no database behind this one")) is None


@pytest.mark.django_db
def test_unique_violations_become_the_field_errors_users_see(tenant: Tenant) -> None:
    first = _schedule(tenant, "nightly")
    first.save(force_insert=True)
    # Inside a transaction.atomic each, as schedule_create and schedule_update call it
    # (it takes no savepoint of its own: the caller's block rolls back).
    with pytest.raises(InvalidSchedule) as by_name, transaction.atomic():
        services.save_schedule_unique(_schedule(tenant, "nightly"), force_insert=True)
    assert by_name.value.detail == {"name": ["a schedule with this name already exists"]}
    with pytest.raises(InvalidSchedule) as by_id, transaction.atomic():
        services.save_schedule_unique(_schedule(tenant, "other", id=first.id), force_insert=True)
    assert by_id.value.detail == {"id": ["this form was already submitted; reload it"]}


@pytest.mark.django_db
def test_a_constraint_name_inside_the_message_is_not_mistaken_for_a_violation(
    tenant: Tenant,
) -> None:
    # A CHECK violation's message quotes the failing row, name included: matching
    # the text would have reported "a schedule with this name already exists".
    bad = _schedule(tenant, "schedule_name_unique_live dispatch_schedule_pkey", priority="bogus")
    with pytest.raises(IntegrityError) as caught:
        services.save_schedule_unique(bad, force_insert=True)
    assert "schedule_name_unique_live" in str(caught.value)
    assert constraint_name(caught.value) == "schedule_priority_valid"
