"""One-off jobs: created once per idempotency key (the same request returns the same
job; a different body under the same key is a conflict)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from django.db import IntegrityError, transaction

from core.db import db_now
from dispatch.exceptions import IdempotencyConflict
from dispatch.models import Schedule
from dispatch.schedule_fields import clean_schedule, partition_for
from dispatch.services.common import (
    _audit,
    _check_quota,
    _event,
    _raise_unique_violation,
    _store,
    _wake_beat,
    schedule_snapshot,
)
from dispatch.states import AuditAction, EventKind
from tenants.roles import Principal


def request_digest(data: dict[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def job_create(*, actor: Principal, data: dict[str, Any]) -> tuple[Schedule, bool]:
    """A one-off job (run now, or at `run_at`). Returns (job, created).

    The same idempotency key with the same body returns the existing job;
    with a different body it is a conflict — a retried request can never
    create a second job, nor silently mean something else.
    """
    key = data.get("idempotency_key")
    digest = request_digest(data)
    if key:
        existing = _job_by_key(actor, key)
        if existing is not None:
            return _same_job(existing, digest), False
    try:
        return _job_insert(actor=actor, data=data, digest=digest), True
    except IntegrityError as exc:
        # Lost a race with a concurrent request carrying the same key (its
        # default name collides first, or the key itself does).
        if key:
            existing = _job_by_key(actor, key)
            if existing is not None:
                return _same_job(existing, digest), False
        _raise_unique_violation(exc)
        raise


def _job_by_key(actor: Principal, key: str) -> Schedule | None:
    return Schedule.objects.filter(tenant=actor.tenant, idempotency_key=key).first()


def _same_job(existing: Schedule, digest: str) -> Schedule:
    if existing.request_digest != digest:
        raise IdempotencyConflict(
            "this idempotency_key was already used with a different request body",
            detail={"idempotency_key": ["already used with a different request body"]},
        )
    return existing


@transaction.atomic
def _job_insert(*, actor: Principal, data: dict[str, Any], digest: str) -> Schedule:
    schedule_id = uuid.uuid4()
    now = db_now()
    key = data.get("idempotency_key")
    fields = {k: v for k, v in data.items() if k not in {"idempotency_key"}}
    # The default name is a label only (the key itself is unique): a key too
    # long to fit in a name gets the id-based one rather than an error about
    # `name`, a field the client never sent.
    default_name = f"job-{key}" if key and len(key) <= 196 else f"job-{schedule_id.hex[:12]}"
    fields.setdefault("name", default_name)
    if fields.get("run_at") is None:
        fields["run_at"] = now
    spec = clean_schedule(tenant=actor.tenant, data=fields, schedule_id=schedule_id)
    _check_quota(actor)
    schedule = Schedule(
        id=schedule_id,
        tenant=actor.tenant,
        partition=partition_for(schedule_id),
        created_by=actor.label,
        idempotency_key=key,
        request_digest=digest,
    )
    _store(schedule, spec)
    schedule.next_run_at = schedule.run_at
    # A unique-key race surfaces as IntegrityError to job_create, which re-reads.
    schedule.save(force_insert=True)
    audit = _audit(
        actor,
        AuditAction.JOB_CREATE,
        schedule,
        after=schedule_snapshot(schedule) | {"idempotency_key": key},
    )
    _event(
        schedule,
        EventKind.CREATED,
        f"one-off job created by {actor.label}",
        actor=actor,
        audit=audit,
    )
    _wake_beat(schedule, now=now)
    return schedule
