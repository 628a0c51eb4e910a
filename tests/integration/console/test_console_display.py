"""What the console shows, read the way a person reads it (issue 35): the schedules
list's last run is one that ran, bulk results name their schedules, a finished run
offers no cancel, durations read in ms / s / min, and the explainer's answer reads
as a sentence with a coloured, worded answer badge."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from dispatch import services
from tests.support.console_support import World, text
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


def _row_of(html: str, name: str) -> str:
    """The schedules list's table row whose name link is `name`."""
    for row in re.findall(r"<tr>.*?</tr>", html, re.S):
        if re.search(rf">{re.escape(name)}</a>", row):
            return row
    raise AssertionError(f"no row for {name}")


# --- defect 11: the schedules list's "Last run" -------------------------------------------


def test_last_run_is_the_newest_run_that_started_not_the_upcoming_one(world: World) -> None:
    s, now = world.schedule, services.db_now()
    # The world's manual trigger is waiting too: not a run yet.
    ran = execution_row(
        s,
        now - timedelta(hours=2),
        state="dead",
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=2) + timedelta(seconds=3),
    )
    execution_row(s, now + timedelta(hours=1), state="scheduled")
    execution_row(s, now + timedelta(minutes=1), state="queued")

    row = _row_of(text(world.client("viewer").get("/schedules/")), s.name)

    last_cell = re.findall(r"<td>(.*?)</td>", row, re.S)[-1]
    assert f'href="/executions/{ran.id}/"' in last_cell, last_cell
    assert "dead" in last_cell and "scheduled" not in last_cell and "queued" not in last_cell


def test_last_run_says_never_while_the_only_execution_is_waiting(world: World) -> None:
    # The world's schedule has only its manual trigger's execution, not started yet.
    assert world.execution.state in ("scheduled", "queued")

    row = _row_of(text(world.client("viewer").get("/schedules/")), world.schedule.name)

    last_cell = re.findall(r"<td>(.*?)</td>", row, re.S)[-1]
    assert "never" in last_cell and "/executions/" not in last_cell, last_cell
