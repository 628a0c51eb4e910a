"""Retention deletes exactly the expired rows, archives them first, and never
touches non-final executions or occurrence keys inside the misfire horizon."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler import retention
from tenants.roles import Principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def make_rows(s: Schedule, now: Any) -> dict[str, Execution]:
    def ex(days: float, state: str) -> Execution:
        at = now - timedelta(days=days)
        e = execution_row(s, at, state=state)
        ExecutionEvent.objects.create(
            tenant=s.tenant, schedule=s, execution=e, kind="attempt_succeeded", message="ok"
        )
        return e

    return {
        "old_ok": ex(40, "succeeded"),
        "old_dead": ex(35, "dead"),
        "old_skipped": ex(31, "skipped"),
        "old_running": ex(45, "running"),
        "recent": ex(5, "succeeded"),
        "edge": ex(29, "succeeded"),
    }


def test_purge_deletes_exactly_the_expired_final_rows_and_archives_them(
    admin_principal: Principal, tmp_path: Path
) -> None:
    s = services.schedule_create(
        actor=admin_principal, data={"name": "r", "cron": "0 * * * *", "target": TARGET}
    )
    now = services.db_now()
    rows = make_rows(s, now)
    old_note = ExecutionEvent.objects.create(
        tenant=s.tenant, schedule=s, kind="paused", message="old pause"
    )
    ExecutionEvent.objects.filter(pk=old_note.pk).update(at=now - timedelta(days=60))
    result = retention.purge(now=now, batch=2, archive_dir=tmp_path)
    remaining = set(Execution.objects.values_list("id", flat=True))
    assert remaining == {rows["old_running"].id, rows["recent"].id, rows["edge"].id}
    assert result.executions == 3
    assert not ExecutionEvent.objects.filter(pk=old_note.pk).exists()
    assert ExecutionEvent.objects.filter(execution=rows["recent"]).exists()
    archived = [
        json.loads(line)
        for line in (tmp_path / "billing" / "executions.jsonl").read_text().splitlines()
    ]
    assert {a["execution"]["id"] for a in archived} == {
        str(rows[k].id) for k in ("old_ok", "old_dead", "old_skipped")
    }
    assert all(a["events"][0]["kind"] == "attempt_succeeded" for a in archived)
    assert retention.purge(now=now).executions == 0  # idempotent


def test_the_misfire_horizon_wins_over_a_short_retention(
    admin_principal: Principal, settings: Any
) -> None:
    settings.RETENTION_DAYS = 1
    settings.RETENTION_MISFIRE_HORIZON_S = 10 * 24 * 3600
    s = services.schedule_create(
        actor=admin_principal, data={"name": "r", "cron": "0 * * * *", "target": TARGET}
    )
    now = services.db_now()
    rows = make_rows(s, now)
    retention.purge(now=now)
    remaining = set(Execution.objects.values_list("id", flat=True))
    assert rows["recent"].id in remaining  # 5 days old: past retention, inside the horizon
    assert rows["old_ok"].id not in remaining


def test_retention_command(admin_principal: Principal, capsys: Any) -> None:
    s = services.schedule_create(
        actor=admin_principal, data={"name": "r", "cron": "0 * * * *", "target": TARGET}
    )
    make_rows(s, services.db_now())
    call_command("retention")
    assert "deleted 3 executions" in capsys.readouterr().out
