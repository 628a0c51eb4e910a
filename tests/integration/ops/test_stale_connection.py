"""A persistent connection the server ended (a restart, a fail-over's demoted
primary) is replaced before a worker's next task, as Django's health check
(CONN_HEALTH_CHECKS) does for its own cursors: the task's first named statement (the
claim) runs on a fresh connection instead of failing the task — and a connection
that is still up costs no round trip to check."""

from __future__ import annotations

import pytest
from celery.signals import task_prerun
from django.db import connection

from core.db import core_sql
from core.pgtrace import traced
from tests.support.database_faults import end_backend

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_connection_ended_by_the_server_is_replaced_before_the_next_task() -> None:
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    assert core_sql.scalar("ping") == 1
    pid = connection.connection.info.backend_pid
    end_backend(pid)
    task_prerun.send(sender=None)  # what a worker does before each task (config/celery_app.py)
    assert core_sql.scalar("ping") == 1
    assert connection.connection.info.backend_pid != pid


def test_a_live_connection_is_kept_without_a_round_trip() -> None:
    # A connection of this test's own: one older than CONN_MAX_AGE (this process's,
    # made by an earlier test) is closed by the same hook, by design.
    connection.close()
    assert core_sql.scalar("ping") == 1
    pid = connection.connection.info.backend_pid
    with traced() as trips:
        task_prerun.send(sender=None)
    assert trips.round_trips == 0, str(trips)
    assert core_sql.scalar("ping") == 1
    assert connection.connection.info.backend_pid == pid
