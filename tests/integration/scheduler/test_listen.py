"""Statements on a dedicated raw connection (core.db.Statements.run_on): the beat's
LISTEN runs on its own autocommit connection, and a NOTIFY committed on Django's
connection reaches it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from core.db import core_sql, listen, notify
from dispatch.services import WAKE_CHANNEL

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def raw() -> Iterator[psycopg.Connection[Any]]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    conn = psycopg.connect(**params, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def received(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=5, stop_after=1)]


@pytest.mark.parametrize("channel", [WAKE_CHANNEL, "Wake Up-Now"])
def test_a_listen_on_a_dedicated_connection_hears_a_committed_notify(
    raw: psycopg.Connection[Any], channel: str
) -> None:
    """The channel is quoted as an identifier: a name with capitals and spaces
    (which an unquoted LISTEN would fold or refuse) is heard exactly."""
    listen(raw, channel)
    with transaction.atomic():
        notify(channel, "7")
    assert received(raw) == [(channel, "7")]


def test_run_on_binds_parameters_and_returns_named_rows(raw: psycopg.Connection[Any]) -> None:
    (row,) = core_sql.run_on(raw, "db_clock")
    assert row.now.tzinfo is not None
    assert core_sql.run_on(raw, "notify", {"channel": "nobody", "payload": "x"})[0] is not None
    assert core_sql.run_on(raw, "listen", identifiers={"channel": "quiet"}) == []
