"""core.db.unavailable_reason on the errors of servers this machine cannot be put in
the state of (a standby, a server starting up or shutting down), as psycopg raises
them: 57P03 with its SQLSTATE, and libpq's text for a connect that met only hot
standbys. The errors a real server gives here are in
tests/integration/ops/test_database_errors.py."""

from __future__ import annotations

import psycopg
import pytest

from core.db import Unavailable, unavailable_reason

CONNECT = 'connection failed: connection to server at "10.0.0.7", port 5432 failed: '


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (psycopg.errors.CannotConnectNow("the database system is starting up"), "in_recovery"),
        (psycopg.errors.CannotConnectNow("the database system is in recovery mode"), "in_recovery"),
        (psycopg.errors.CannotConnectNow("the database system is shutting down"), "unreachable"),
        (psycopg.OperationalError(CONNECT + "server is in hot standby mode"), "in_recovery"),
        (
            psycopg.OperationalError(CONNECT + "FATAL:  the database system is starting up"),
            "in_recovery",
        ),
        (
            psycopg.OperationalError(
                CONNECT + "FATAL:  the database system is not yet accepting connections"
            ),
            "in_recovery",
        ),
        (
            psycopg.OperationalError(CONNECT + "FATAL:  the database system is shutting down"),
            "unreachable",
        ),
        # Two hosts: one down, one a standby that refuses writes (a fail-over half done).
        (
            psycopg.OperationalError(
                CONNECT + "Connection refused\n" + CONNECT + "session is read-only"
            ),
            "read_only",
        ),
        (psycopg.errors.IdleInTransactionSessionTimeout("terminating connection"), "unreachable"),
        (psycopg.errors.ConnectionFailure("server closed the connection"), "unreachable"),
        (psycopg.errors.DeadlockDetected("deadlock detected"), "busy"),
        (psycopg.errors.UniqueViolation("duplicate key"), None),
    ],
)
def test_states_of_a_fail_over(error: psycopg.Error, reason: str | None) -> None:
    assert unavailable_reason(error) == (Unavailable(reason) if reason else None)


def test_only_a_busy_server_keeps_the_connection() -> None:
    assert [r for r in Unavailable if r.reconnect] == ["unreachable", "read_only", "in_recovery"]
