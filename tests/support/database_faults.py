"""The test database in the states a PostgreSQL fail-over passes through, for tests
whose processes reach it through a fault proxy (tests/support/faultproxy.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from django.db import connection
from psycopg import sql

from tests.support.faultproxy import FaultProxy
from tests.support.procs import db_conninfo, wait_for


def _alter_database(action: str) -> None:
    # On a session of its own that is never read-only, whatever the database's default.
    with psycopg.connect(
        db_conninfo(), autocommit=True, options="-c default_transaction_read_only=off"
    ) as admin:
        admin.execute(sql.SQL(action).format(sql.Identifier(connection.settings_dict["NAME"])))


@contextlib.contextmanager
def read_only(proxy: FaultProxy) -> Iterator[None]:
    """The test database refuses writes (SQLSTATE 25006), as a standby or a primary
    demoted under its sessions does: every new session starts read-only, and the
    current connections through `proxy` are cut so that the next ones are such
    sessions. Restored on exit, without cutting anything: a connection opened
    meanwhile stays read-only until its owner drops it. The test process's own
    connection (not through the proxy, opened before) keeps writing."""
    _alter_database("ALTER DATABASE {} SET default_transaction_read_only = on")
    try:
        proxy.reset()
        yield
    finally:
        _alter_database("ALTER DATABASE {} RESET default_transaction_read_only")


def end_backend(pid: int) -> None:
    """End server process `pid` (a session the server terminates, as a restart or a
    switchover does) and wait until PostgreSQL no longer lists it."""
    with psycopg.connect(db_conninfo(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(
            lambda: (
                not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
            ),
            timeout=10,
            what="the backend to end",
        )
