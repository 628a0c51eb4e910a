"""History retention, row by row: what the day partitions do not cover.

Expired history leaves a whole UTC day at a time — archived to object storage,
verified, detached and dropped (dispatch/history/archive.py). What is left for
this module are the rows before the oldest day partition (in the `_before`
catch-all: an occurrence of an already dropped day, written by a backfill or a
long catch-up): they are deleted in small batches, optionally archived as JSON
lines first.

Only final executions go (succeeded, dead, skipped, cancelled), and never an
occurrence key inside the misfire horizon: a key that could still be fired
again must stay, or the unique constraint could no longer stop a duplicate
(failure contract C1: docs/explanation/failure-contract.md). Each batch is an index
range scan on (tenant,
scheduled_for) with a LIMIT, so the cost of a run depends on what expired,
not on the size of the table. The statements are in dispatch/sql/retention.sql.

The same pass removes one-off jobs whose `delete_after` has passed since their run
ended (`expire_jobs`): a soft delete, as DELETE /v1/jobs/{id} does; their executions
stay until their own retention.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from dispatch.history.partitions import first_kept_start
from dispatch.sql import sql
from dispatch.states import FINAL_STATES, AuditAction, EventKind, state_values

log = logging.getLogger("dispatch.retention")


@dataclass
class PurgeResult:
    executions: int = 0
    events: int = 0
    jobs_expired: int = 0


def cutoff_for(*, now: datetime, retention_days: int) -> datetime:
    horizon = timedelta(seconds=settings.RETENTION_MISFIRE_HORIZON_S)
    return min(now - timedelta(days=retention_days), now - horizon)


def purge(
    *, now: datetime, batch: int = 1000, archive_dir: Path | None = None, max_batches: int = 1000
) -> PurgeResult:
    """Delete expired history for every tenant; returns what was deleted."""
    from tenants.models import Tenant

    result = PurgeResult(jobs_expired=expire_jobs(batch=batch, max_batches=max_batches))
    first_kept = first_kept_start()
    for tenant in Tenant.objects.select_related("quota").all():
        days = (
            getattr(getattr(tenant, "quota", None), "retention_days", None)
            or settings.RETENTION_DAYS
        )
        # Rows of the day partitions leave a day at a time, archived and dropped
        # (dispatch/history/archive.py); row by row goes only what lies before them:
        # an occurrence of an expired day written after its day was dropped.
        cutoff = cutoff_for(now=now, retention_days=days)
        if first_kept is not None:
            cutoff = min(cutoff, first_kept)
        for _ in range(max_batches):
            deleted = _purge_batch(
                tenant_id=tenant.pk,
                slug=tenant.slug,
                cutoff=cutoff,
                batch=batch,
                archive_dir=archive_dir,
            )
            result.executions += deleted[0]
            result.events += deleted[1]
            if deleted == (0, 0):
                break
    if result.executions or result.events:
        log.info("retention: deleted %d executions and %d events", result.executions, result.events)
    return result


def expire_jobs(*, batch: int = 1000, max_batches: int = 1000) -> int:
    """Soft-delete the one-off jobs whose `delete_after` has passed since their run
    ended, in batches of one statement each (dispatch/sql/retention.sql); how many."""
    expired = 0
    params = {
        "batch": batch,
        "final": state_values(FINAL_STATES),
        "action": str(AuditAction.JOB_EXPIRE),
        "kind": str(EventKind.EXPIRED),
    }
    for _ in range(max_batches):
        n = int(sql.scalar("retention_expire_jobs", params))
        expired += n
        if n < batch:
            break
    if expired:
        log.info("retention: removed %d one-off jobs past their delete_after", expired)
    return expired


def _purge_batch(
    *, tenant_id: int, slug: str, cutoff: datetime, batch: int, archive_dir: Path | None
) -> tuple[int, int]:
    params: dict[str, Any] = {"tenant": tenant_id, "cutoff": cutoff, "batch": batch}
    with transaction.atomic():
        picked = sql.rows("retention_pick", params | {"final": state_values(FINAL_STATES)})
        ids = [row.id for row in picked]
        events = 0
        if ids:
            if archive_dir is not None:
                archived = sql.rows("retention_archive", {"ids": ids})
                _archive(archive_dir, slug, [(r.execution, r.events) for r in archived])
            events = int(sql.scalar("retention_delete_events", {"ids": ids}))
            sql.scalar("retention_delete_executions", {"ids": ids})
        events += int(sql.scalar("retention_delete_schedule_events", params))
    return len(ids), events


def _archive(archive_dir: Path, slug: str, rows: list[tuple[str, str]]) -> None:
    # Written before the delete commits: a crash in between leaves a duplicate
    # line in the archive, never a lost row.
    folder = archive_dir / slug
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "executions.jsonl", "a") as fh:
        for execution, events in rows:
            fh.write(
                json.dumps({"execution": json.loads(execution), "events": json.loads(events)})
                + "\n"
            )
