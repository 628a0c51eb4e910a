"""DATABASE_URL with one host or a replicated cluster's several (libpq's multi-host
form): what Django's DATABASES entry becomes, and back to a URL for child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import pg_urls

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "postgresql://sched:s%40cret@db1.internal:5432,db2.internal:5433/scheduler"


def test_a_host_list_becomes_libpq_host_and_port_lists() -> None:
    config = pg_urls.parse(CLUSTER + "?target_session_attrs=read-write")
    assert config["HOST"] == "db1.internal,db2.internal"
    assert config["PORT"] == "5432,5433"
    assert (config["USER"], config["PASSWORD"], config["NAME"]) == ("sched", "s@cret", "scheduler")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["OPTIONS"]["target_session_attrs"] == "read-write"


def test_a_host_list_defaults_to_the_writable_host_and_bounded_tcp_waits() -> None:
    assert pg_urls.parse(CLUSTER)["OPTIONS"] == {
        "target_session_attrs": "read-write",
        "connect_timeout": 5,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 15000,
    }


def test_the_urls_own_options_win_over_the_defaults() -> None:
    options = pg_urls.parse(
        CLUSTER + "?target_session_attrs=primary&connect_timeout=2&sslmode=verify-full"
        "&tcp_user_timeout=0"
    )["OPTIONS"]
    assert options == pg_urls.MULTI_HOST_DEFAULTS | {
        "target_session_attrs": "primary",
        "connect_timeout": 2,
        "sslmode": "verify-full",
        "tcp_user_timeout": 0,
    }


def test_libpq_tcp_settings_in_the_query_reach_the_connection() -> None:
    # docs/how-to/ha-postgresql.md: bounding the wait on a machine that sends no reset.
    options = pg_urls.parse(CLUSTER + "?keepalives_idle=10&tcp_user_timeout=15000")["OPTIONS"]
    assert options["keepalives_idle"] == 10 and options["tcp_user_timeout"] == 15000


def test_django_settings_pass_through() -> None:
    config = pg_urls.parse(CLUSTER, conn_max_age=60, conn_health_checks=True)
    assert config["CONN_MAX_AGE"] == 60 and config["CONN_HEALTH_CHECKS"] is True


def test_ports_may_be_left_out_for_some_or_all_hosts() -> None:
    assert pg_urls.parse("postgresql://u@h1,h2/db")["PORT"] == ""
    assert pg_urls.parse("postgresql://u@h1:6432,h2/db")["PORT"] == "6432,"
    assert pg_urls.hosts("postgresql://u@h1:6432,h2/db") == [("h1", "6432"), ("h2", "")]


def test_ipv6_hosts_in_a_list() -> None:
    config = pg_urls.parse("postgresql://u@[::1]:5432,[fd00::2]:5433/db")
    assert (config["HOST"], config["PORT"]) == ("::1,fd00::2", "5432,5433")


def test_one_host_is_read_as_before_with_no_defaults_added() -> None:
    config = pg_urls.parse("postgresql://postgres@127.0.0.1:5432/x?sslmode=require")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("127.0.0.1", 5432, "x")
    assert config["OPTIONS"] == {"sslmode": "require"}
    assert "OPTIONS" not in pg_urls.parse("postgresql://postgres@127.0.0.1:5432/x")


def test_a_socket_directory_host_is_kept() -> None:
    config = pg_urls.parse("postgresql://postgres@%2Frun%2Fpostgresql/sched")
    assert config["HOST"] == "/run/postgresql"
    assert pg_urls.hosts("postgresql://postgres@%2Frun%2Fpostgresql/sched") == [
        ("/run/postgresql", "")
    ]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h1:5432,h2:54x3/db",
        "postgresql://u@h1:5432,,h2/db",
        "postgresql://u@[::1:5432,h2/db",
        "mysql://u@h1,h2/db",
    ],
)
def test_unreadable_urls_are_refused_naming_the_fault(url: str) -> None:
    with pytest.raises(pg_urls.BadDatabaseUrl):
        pg_urls.parse(url)


def test_url_of_round_trips_a_host_list_and_its_connection_options() -> None:
    url = "postgresql://sched:s%40cret@db1.internal:5432,db2.internal:5433/scheduler?target_session_attrs=read-write&connect_timeout=5&keepalives_idle=10&keepalives_interval=5&keepalives_count=3&tcp_user_timeout=15000"
    config = pg_urls.parse(url)
    config["OPTIONS"]["options"] = "-c idle_in_transaction_session_timeout=60000"
    assert pg_urls.url_of(config) == url
    # A child process gets the same TCP bounds as its parent, even the defaults.
    short = pg_urls.parse(CLUSTER)
    assert pg_urls.parse(pg_urls.url_of(short))["OPTIONS"] == short["OPTIONS"]
    assert pg_urls.parse(pg_urls.url_of(config))["HOST"] == "db1.internal,db2.internal"


def test_url_of_a_single_host() -> None:
    config = pg_urls.parse("postgresql://postgres@127.0.0.1:5432/test_x")
    assert pg_urls.url_of(config) == "postgresql://postgres@127.0.0.1:5432/test_x"


def test_settings_read_a_multi_host_database_url() -> None:
    """config/settings.py in a process of its own, as every platform process loads it."""
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; "
        "print(json.dumps([d['HOST'], d['PORT'], d['NAME'], d['OPTIONS']]))"
    )
    env = dict(os.environ, DATABASE_URL=CLUSTER, DJANGO_SETTINGS_MODULE="config.settings")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    host, port, name, options = json.loads(out.stdout.strip().splitlines()[-1])
    assert (host, port, name) == ("db1.internal,db2.internal", "5432,5433", "scheduler")
    assert options["target_session_attrs"] == "read-write"
    assert "idle_in_transaction_session_timeout" in options["options"]


def test_settings_refuse_an_unreadable_host_list() -> None:
    env = dict(
        os.environ,
        DATABASE_URL="postgresql://u@h1:5432,h2:nope/db",
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "DATABASE_URL cannot be read: port 'nope' of host 'h2' is not a number" in out.stderr
