"""Prepared statements over the day partitions (DB_PREPARED_STATEMENTS, on by default).

The beat's statements that cannot prune history by time (its probe, its loads) were
planned over every day partition at every execution: 61 ms for the probe at 40
partitions, against 0.6 ms to run it. psycopg now prepares a runner statement once it
has run DB_PREPARE_AFTER times on a connection, and PostgreSQL keeps a plan for it
(generic when pruning at planning gains nothing). What must hold: the plan is made
once, and a plan made before a day partition was created or dropped, by another
process (the beat that runs retention), still finds every row and never fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from core.db import generic_plans
from dispatch import partitioning, selectors
from dispatch.history import archive, partitions
from dispatch.history.objects import FileStore
from dispatch.scheduler import store
from dispatch.sql import sql
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = {"type": "http", "url": "https://billing.internal/h"}
RUNS = settings.DB_PREPARE_AFTER + 8  # prepared, then past PostgreSQL's five custom plans


def prepared(name: str, *, marker: str | None = None) -> list[Any]:
    """This connection's prepared statements whose text is the named statement's (or
    holds `marker`, for one whose first line has parameters: psycopg sends them as $n),
    with how many generic and custom plans PostgreSQL made for each."""
    with connection.cursor() as cur:
        if marker is None:
            cur.execute(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE strpos(statement, %s) = 1",
                [sql[name].splitlines()[0]],
            )
        else:
            assert marker in sql[name]
            cur.execute(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE strpos(statement, %s) > 0",
                [marker],
            )
        return cur.fetchall()


def in_another_session(work: Callable[[], object]) -> None:
    """`work` on a connection of its own, as another beat would do it."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported to the test below
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and not failures, failures


def pending_ids(numbers: list[int]) -> set[Any]:
    return {r.id for r in store.pending_executions(numbers=numbers, lookahead=60, limit=1000)}


def test_the_beat_probe_is_planned_once_per_connection(admin_principal: Principal) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    numbers = list(range(partitioning.LOGICAL_PARTITIONS))  # every beat's, as one beat
    answers = set()
    for _ in range(RUNS):
        probe = store.probe(
            numbers=numbers, lookahead=5, since=None, sweep=True, republish_s=60, grace_s=30
        )
        answers.add(probe)
    assert len(answers) == 1  # the same answer, prepared or not
    ((_, generic, custom),) = prepared("beat_probe")
    # Planned as a custom plan five times (PostgreSQL's rule), then once more as a
    # generic plan, reused at every execution since.
    assert generic >= RUNS - settings.DB_PREPARE_AFTER - 5, (generic, custom)
    assert custom <= 5, (generic, custom)
    # And it answers: a row due now is seen by the same prepared statement.
    execution_row(schedule, db_now() - timedelta(seconds=5))
    probe = store.probe(
        numbers=numbers, lookahead=5, since=None, sweep=True, republish_s=60, grace_s=30
    )
    assert probe.unloaded


def test_a_plan_made_before_days_change_finds_every_row(
    admin_principal: Principal, tmp_path: Path
) -> None:
    """Another session carves old days out of the lower catch-all, then retires one:
    the prepared load, planned before either, finds the row now in a new partition,
    and runs on after a partition it planned over was dropped."""
    schedule = make_schedule(admin_principal, TARGET)
    numbers = [schedule.partition]
    now = db_now()
    first = partitions.days(partitions.EXECUTIONS)[0].day
    old = execution_row(schedule, partitions.day_start(first - timedelta(days=2)), due_at=now)
    for _ in range(RUNS):
        assert pending_ids(numbers) == {old.id}
    ((statement, generic, _),) = prepared("pending_executions")
    assert generic > 0

    in_another_session(lambda: partitions.reopen_days(first - timedelta(days=3)))
    assert partitions.days(partitions.EXECUTIONS)[0].day == first - timedelta(days=3)
    moved = execution_row(
        schedule, partitions.day_start(first - timedelta(days=1)) + timedelta(hours=1), due_at=now
    )
    assert pending_ids(numbers) == {old.id, moved.id}

    in_another_session(lambda: archive.retire_day(first - timedelta(days=3), FileStore(tmp_path)))
    assert partitions.days(partitions.EXECUTIONS)[0].day == first - timedelta(days=2)
    assert pending_ids(numbers) == {old.id, moved.id}
    # The same prepared statement all along: PostgreSQL replanned it, nothing was
    # dropped on this side.
    assert [row[0] for row in prepared("pending_executions")] == [statement]


def test_the_dashboards_reads_of_every_day_are_planned_once_per_connection(
    admin_principal: Principal,
) -> None:
    """The dashboard's in-flight count and running list cannot name a day: a rerun brings
    an old occurrence back in flight. Prepared (dispatch/sql/dashboard.sql), they are
    planned a few times per connection and then kept, and still see every day."""
    schedule = make_schedule(admin_principal, TARGET)
    now = db_now()
    rerun = execution_row(
        schedule, now - timedelta(days=20), state="running", started_at=now - timedelta(seconds=5)
    )
    fresh = execution_row(
        schedule,
        now - timedelta(minutes=1),
        state="running",
        started_at=now - timedelta(seconds=30),
    )
    execution_row(schedule, now - timedelta(minutes=2), state="queued")
    execution_row(schedule, now - timedelta(minutes=3), state="succeeded")
    tenant = admin_principal.tenant
    for _ in range(RUNS):
        running = selectors.executions_running(tenant=tenant)
        assert [e.id for e in running] == [rerun.id, fresh.id]  # the latest started first
        usage = selectors.tenant_usage(tenant=tenant, day_start=now - timedelta(hours=1))
        assert (usage.inflight, usage.today) == (3, 3)
    for name in ("tenant_inflight_count", "tenant_running_keys"):
        ((_, generic, custom),) = prepared(name)
        assert generic >= RUNS - settings.DB_PREPARE_AFTER - 5, (name, generic, custom)
        assert custom <= 5, (name, generic, custom)


def test_a_schedules_health_is_planned_once_per_connection(admin_principal: Principal) -> None:
    """Its last run, last success and failure streak read every day, its 30 days only
    those: a custom plan, pruned, always looks cheaper than the generic one, so
    PostgreSQL made a new plan over every partition at every page. Run under
    generic_plans, the statement keeps one; the answer is the same, and the setting
    does not outlive the read."""
    schedule = make_schedule(admin_principal, TARGET)
    now = db_now()
    execution_row(schedule, now - timedelta(days=40), state="succeeded")  # a day older than 30
    for minutes in (30, 20, 10):
        execution_row(schedule, now - timedelta(minutes=minutes), state="dead")
    for _ in range(RUNS):
        health = selectors.schedule_health(
            tenant=admin_principal.tenant, schedule=schedule, now=db_now()
        )
        assert health.last_state == "dead" and health.consecutive_failures == 3
        assert health.last_success_at == now - timedelta(days=40)
        assert health.windows["30d"].runs == 3
        with connection.cursor() as cur:
            cur.execute("SHOW plan_cache_mode")
            assert cur.fetchone()[0] == "auto"
    ((_, generic, custom),) = prepared("schedule_health", marker="AS last_alert_kind")
    assert custom == 0 and generic >= RUNS - settings.DB_PREPARE_AFTER - 1, (generic, custom)


def plan_cache_mode() -> str:
    with connection.cursor() as cur:
        cur.execute("SHOW plan_cache_mode")
        mode: str = cur.fetchone()[0]
        return mode


def test_generic_plans_hold_inside_only_and_only_with_prepared_statements(settings: Any) -> None:
    with generic_plans():
        assert plan_cache_mode() == "force_generic_plan"
    assert plan_cache_mode() == "auto"
    # Without prepared statements no plan is kept: a generic plan made at every
    # execution would cost more than the custom one, so the choice is left alone.
    settings.DB_PREPARED_STATEMENTS = False
    with CaptureQueriesContext(connection) as queries, generic_plans():
        assert plan_cache_mode() == "auto"
    assert len(queries.captured_queries) == 1  # the SHOW: nothing was set
