"""One-off jobs: created once per idempotency key (the same request returns the same
job; a different body under the same key is a conflict), one at a time or up to
BATCH_MAX in one request (`job_create_batch`)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from psycopg.types.json import Jsonb

from config.middleware import request_id_var
from core.db import db_now
from core.errors import AppError
from dispatch.exceptions import IdempotencyConflict, InvalidSchedule, QuotaExceeded
from dispatch.models import Schedule
from dispatch.partitioning import partition_for
from dispatch.schedule_fields import clean_schedule
from dispatch.services.common import (
    WAKE_CHANNEL,
    WAKE_HORIZON,
    check_quota,
    quota_message,
    quota_room,
    relations_known_all,
    schedule_snapshot,
)
from dispatch.sql import sql
from dispatch.states import AuditAction, EventData, EventKind
from dispatch.targets.http import urls_checked_once
from tenants.roles import Principal

# Jobs per POST /v1/jobs:batch, all written in one transaction (one chunk): about
# 300 KB of JSON, inside API_BULK_MAX_BODY_BYTES.
BATCH_MAX = 1000


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
    job = _job_insert(actor=actor, data=data, digest=digest)
    if job is not None:
        return job, True
    # Lost a race with a concurrent request carrying the same key (its default name
    # collides first, or the key itself does), or the name is another schedule's.
    existing = _job_by_key(actor, key) if key else None
    if existing is not None:
        return _same_job(existing, digest), False
    raise InvalidSchedule.field("name", "a schedule with this name already exists")


def _job_by_key(actor: Principal, key: str) -> Schedule | None:
    return Schedule.objects.filter(tenant=actor.tenant, idempotency_key=key).first()


def _same_job(existing: Schedule, digest: str) -> Schedule:
    if existing.request_digest != digest:
        raise IdempotencyConflict(
            "this idempotency_key was already used with a different request body",
            detail={"idempotency_key": ["already used with a different request body"]},
        )
    return existing


class JobMaker:
    """Unsaved jobs (Schedule instances) built as a query builds the rows it reads: every
    column's value given positionally, the constructor's fast path. The values a job
    does not set are the model's defaults, taken from one instance Django's constructor
    filled for the request; a default that is made anew per instance (a callable: the id,
    the retry dict) is made anew per job. A batch builds 1,000 of them."""

    def __init__(self, actor: Principal) -> None:
        fields = Schedule._meta.concrete_fields
        blank = Schedule(tenant=actor.tenant, created_by=actor.label)
        self.columns = [f.attname for f in fields]
        self.known = frozenset(self.columns)
        self.defaults = {name: getattr(blank, name) for name in self.columns}
        self.per_job = [f for f in fields if f.has_default() and callable(f.default)]
        self.tenant = actor.tenant

    def make(self, values: dict[str, Any]) -> Schedule:
        if not values.keys() <= self.known:
            raise TypeError(f"not Schedule columns: {sorted(values.keys() - self.known)}")
        row = self.defaults | values
        for f in self.per_job:
            if f.attname not in values:
                row[f.attname] = f.get_default()
        # Positional, as Model.from_db passes a row (the stubs type the first as `id`).
        job = Schedule(*[row[name] for name in self.columns])  # type: ignore[misc]
        job.tenant = self.tenant  # the relation cached: the answer names it without a query
        return job


def _job_build(
    *, actor: Principal, maker: JobMaker, data: dict[str, Any], digest: str, now: datetime
) -> Schedule:
    """The unsaved job of `data` (validated: raises InvalidSchedule naming the field)."""
    schedule_id = uuid.uuid4()
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
    return maker.make(
        spec.values
        | {
            "id": schedule_id,
            "partition": partition_for(schedule_id),
            "created_by": actor.label,
            "idempotency_key": key,
            "request_digest": digest,
            "next_run_at": spec.values["run_at"],
        }
    )


def _no_upstreams(jobs: list[Schedule]) -> None:
    # A job has no depends_on (nor calendars: a one-off reads none).
    relations_known_all(jobs, no_upstreams=True, no_calendars=False)


@transaction.atomic
def _job_insert(*, actor: Principal, data: dict[str, Any], digest: str) -> Schedule | None:
    """The job inserted with its audit row, its event and the beat's wake-up in one
    statement (a batch's, of one job); None if a unique key was taken first."""
    now = db_now()
    schedule = _job_build(actor=actor, maker=JobMaker(actor), data=data, digest=digest, now=now)
    check_quota(actor)
    saved = _insert_jobs(actor, [schedule], message=f"one-off job created by {actor.label}")
    _no_upstreams(list(saved.values()))
    return saved.get(schedule.id)


# --- POST /v1/jobs:batch ---------------------------------------------------------------


@dataclass
class BatchResult:
    """One item's outcome: 201 created, 200 the same key and body as an existing job,
    or the error (409 other body, 400 invalid, 422 quota) with the item's job unset."""

    status: int
    job: Schedule | None = None
    error: AppError | None = None


def job_create_batch(
    *, actor: Principal, items: list[dict[str, Any] | AppError]
) -> list[BatchResult]:
    """Create up to BATCH_MAX one-off jobs in one transaction; results in `items`' order.

    Each item is the validated body of a POST /v1/jobs with its own idempotency key
    (keys distinct within the request), or the error its validation raised, which
    is its result. An item that fails (invalid, other body under its key, over the
    quota) fails alone: the others are still created. Set-based: one read of the
    existing keys, one quota check for the whole batch, one INSERT of the jobs
    (ON CONFLICT DO NOTHING: a concurrent request that took a key or a name first
    loses this item only), one of their audit rows, one of their events, one
    NOTIFY.
    """
    if len(items) > BATCH_MAX:
        raise InvalidSchedule.field("jobs", f"at most {BATCH_MAX} jobs per request")
    # The items' targets mostly share a URL: each distinct one is checked once.
    with transaction.atomic(), urls_checked_once():
        return _batch(actor, items)


def _batch(actor: Principal, items: list[dict[str, Any] | AppError]) -> list[BatchResult]:
    results: list[BatchResult | None] = [
        BatchResult(item.status, error=item) if isinstance(item, AppError) else None
        for item in items
    ]
    wanted = {i: item for i, item in enumerate(items) if not isinstance(item, AppError)}
    digests = {i: request_digest(data) for i, data in wanted.items()}
    keys = [data["idempotency_key"] for data in wanted.values()]
    existing = _jobs_by_keys(actor, keys)
    now = db_now()
    maker = JobMaker(actor)
    fresh: dict[int, Schedule] = {}
    for i, data in wanted.items():
        found = existing.get(data["idempotency_key"])
        if found is not None:
            results[i] = _same_result(found, digests[i])
            continue
        try:
            fresh[i] = _job_build(actor=actor, maker=maker, data=data, digest=digests[i], now=now)
        except InvalidSchedule as exc:
            results[i] = BatchResult(exc.status, error=exc)
    if fresh:
        room, cap = quota_room(actor, wanted=len(fresh))
        # Within the quota, the earlier items win (request order).
        for i in list(fresh)[room:]:
            over = QuotaExceeded(quota_message(actor, cap))
            results[i] = BatchResult(over.status, error=over)
            del fresh[i]
    saved = _insert_jobs(
        actor, list(fresh.values()), message=f"one-off job created by {actor.label} (batch)"
    )
    lost = {i: job for i, job in fresh.items() if job.id not in saved}
    if lost:
        # Beaten to a key by a concurrent request (same or other body), or a name in use.
        taken = _jobs_by_keys(actor, [job.idempotency_key for job in lost.values()])
        for i, job in lost.items():
            other = taken.get(str(job.idempotency_key))
            if other is not None:
                results[i] = _same_result(other, job.request_digest)
            else:
                error = InvalidSchedule.field("name", "a schedule with this name already exists")
                results[i] = BatchResult(error.status, error=error)
    _no_upstreams(list(saved.values()))
    for i, job in fresh.items():
        if job.id in saved:
            results[i] = BatchResult(201, job=saved[job.id])
    done = [r for r in results if r is not None]
    assert len(done) == len(items)  # noqa: S101 - every item has exactly one outcome
    return done


def _jobs_by_keys(actor: Principal, keys: list[str | None]) -> dict[str, Schedule]:
    wanted = [k for k in keys if k]
    if not wanted:
        return {}
    jobs = Schedule.objects.filter(tenant=actor.tenant, idempotency_key__in=wanted)
    out: dict[str, Schedule] = {}
    for job in jobs.prefetch_related("depends_on"):
        job.tenant = actor.tenant  # the output names it: no query per job
        out[str(job.idempotency_key)] = job
    return out


def _same_result(existing: Schedule, digest: str) -> BatchResult:
    try:
        return BatchResult(200, job=_same_job(existing, digest))
    except IdempotencyConflict as exc:
        return BatchResult(exc.status, error=exc)


def _insert_jobs(
    actor: Principal, jobs: list[Schedule], *, message: str
) -> dict[uuid.UUID, Schedule]:
    """Insert `jobs` (skipping any that would violate a unique key), one audit row
    each (as POST /v1/jobs writes: the audit log reads alike) and their timeline
    events, in one statement; returns the inserted ones by id."""
    if not jobs:
        return {}
    rows = sql.rows(
        "jobs_insert",
        {
            "ids": [j.id for j in jobs],
            "names": [j.name for j in jobs],
            "kinds": [j.kind for j in jobs],
            "crons": [j.cron for j in jobs],
            "timezones": [j.timezone for j in jobs],
            "run_ats": [j.run_at for j in jobs],
            "targets": [Jsonb(j.target) for j in jobs],
            "retries": [Jsonb(j.retry) for j in jobs],
            "timeouts": [j.timeout_s for j in jobs],
            "priorities": [j.priority for j in jobs],
            "durations": [j.duration_class for j in jobs],
            "overlaps": [j.overlap for j in jobs],
            "misfires": [j.misfire for j in jobs],
            "graces": [j.misfire_grace_s for j in jobs],
            "catch_ups": [j.catch_up_limit for j in jobs],
            "jitters": [j.jitter_s for j in jobs],
            "keys": [j.idempotency_key for j in jobs],
            "digests": [j.request_digest for j in jobs],
            "next_runs": [j.next_run_at for j in jobs],
            "partitions": [j.partition for j in jobs],
            "delete_afters": [j.delete_after for j in jobs],
            "ckeys": [
                None if j.concurrency_key is None else Jsonb(j.concurrency_key) for j in jobs
            ],
            "snapshots": [
                Jsonb(schedule_snapshot(j) | {"idempotency_key": j.idempotency_key}) for j in jobs
            ],
            "tenant_id": actor.tenant.pk,
            "actor_kind": actor.actor_kind,
            "actor_id": actor.actor_id,
            "actor_label": actor.label,
            "action": str(AuditAction.JOB_CREATE),
            "request_id": request_id_var.get(),
            "event_kind": str(EventKind.CREATED),
            "message": message,
            "audit_key": str(EventData.AUDIT_ID),
            "channel": WAKE_CHANNEL,
            "wake_s": WAKE_HORIZON.total_seconds(),
        },
    )
    by_id = {j.id: j for j in jobs}
    saved: dict[uuid.UUID, Schedule] = {}
    for row in rows:
        job = by_id[row.id]
        job.created_at, job.updated_at = row.created_at, row.updated_at
        job._state.adding = False
        job._state.db = "default"
        saved[job.id] = job
    return saved
