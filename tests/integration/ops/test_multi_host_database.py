"""A multi-host DATABASE_URL against the real server: a dead host in front of the
list is passed over, by Django's connection and by the beat's raw LISTEN connection
alike. (That a standby in the list is passed over for the primary is shown on a real
Patroni cluster: tests/chaos/test_failover.py.)"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.utils import ConnectionHandler

from core import pg_urls
from tests.support.net import free_port

pytestmark = pytest.mark.django_db


def _cluster_url() -> str:
    """The test database behind a host on which nothing listens (connection refused)."""
    single = connection.settings_dict
    dead = f"127.0.0.1:{free_port()}"
    host = single["HOST"] or "127.0.0.1"
    live = f"{host}:{single['PORT']}" if single["PORT"] else host
    auth = single["USER"] or "postgres"
    return f"postgresql://{auth}@{dead},{live}/{single['NAME']}"


@pytest.fixture
def listed() -> Any:
    if str(connection.settings_dict["HOST"] or "").startswith("/"):
        pytest.skip("the test database is on a UNIX socket (embedded): no TCP host to list")
    handler = ConnectionHandler({"default": pg_urls.parse(_cluster_url())})
    yield handler["default"]
    handler.close_all()


def test_django_connects_past_a_dead_host_to_the_writable_one(listed: Any) -> None:
    with listed.cursor() as cur:
        cur.execute("SELECT current_database(), inet_server_port(), pg_is_in_recovery()")
        name, port, in_recovery = cur.fetchone()
    assert name == connection.settings_dict["NAME"]
    assert port == int(connection.settings_dict["PORT"])
    assert in_recovery is False
    assert listed.get_connection_params()["target_session_attrs"] == "read-write"


def test_the_beats_listen_connection_follows_the_host_list(listed: Any) -> None:
    # What dispatch/scheduler/loop.py does: Django's parameters on a raw autocommit connection.
    params = listed.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as raw:
        assert raw.info.port == int(connection.settings_dict["PORT"])
        raw.execute("LISTEN sched_test_multi_host")
