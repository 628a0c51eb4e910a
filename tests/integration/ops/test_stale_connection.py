"""A persistent connection the server ended (a restart, a fail-over's demoted
primary) is replaced before the next task's first named statement, as Django's
health check (CONN_HEALTH_CHECKS) does for its own cursors: the statement runs on a
fresh connection instead of failing the task."""

from __future__ import annotations

import psycopg
import pytest
from django.db import close_old_connections, connection

from core.db import core_sql
from tests.support.procs import db_conninfo, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_connection_ended_by_the_server_is_replaced_before_the_next_statement() -> None:
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    assert core_sql.scalar("ping") == 1
    pid = connection.connection.info.backend_pid
    with psycopg.connect(db_conninfo(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(
            lambda: (
                not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
            ),
            timeout=10,
            what="the backend to end",
        )
    close_old_connections()  # what the worker does before each task (config/celery_app.py)
    assert core_sql.scalar("ping") == 1
    assert connection.connection.info.backend_pid != pid
