"""Reads from a streaming replica, within the staleness bound (core/replicas.py).

A replicated PostgreSQL of the test's own (tests/support/hacluster.py: Patroni, a
primary and a streaming standby), the platform migrated onto it, and a real web
process (gunicorn) with DATABASE_URL on the cluster and DATABASE_REPLICA_URL on the
standby. The standby's replay is paused with `pg_wal_replay_pause()`, which makes its
staleness real and controllable:

* while the replica is within REPLICA_MAX_LAG_S, the marked pages (the schedules list,
  the runs page, the dashboard, /metrics) read from it: a schedule created on the
  primary after the pause is not listed yet, and the page says it read from a replica
  and how far behind it was;
* logging in, sessions and the tenant's membership are read from the primary even on
  those pages: a user created after the pause logs in and is served at once;
* an unmarked page (a schedule's own page) reads from the primary: it shows that
  schedule;
* once the lag passes the bound the same pages read from the primary and say why;
  replay resumed, they go back to the replica;
* with the standby gone the pages are still served, from the primary.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import hacluster
from tests.support.hacluster import HACluster
from tests.support.procs import Proc, WebServer, manage, wait_for

pytestmark = [pytest.mark.system, pytest.mark.slow]

DB = "sched"
BOUND_S = 10  # REPLICA_MAX_LAG_S of the web under test
PASSWORD = "replica-reader-pw-1"
HAS_SCHEDULE = "SELECT 1 FROM dispatch_schedule WHERE id = %s"
TARGET = "http://127.0.0.1:9/hook"  # never called: nothing fires here (no beat runs)

SEED = """
import json
from tenants import services as tenant_services
from tenants.roles import Role
tenant = tenant_services.tenant_create(slug="replica-t", name="replica-t")
user = tenant_services.user_ensure(username="reader", password={pw!r})
tenant_services.membership_set(tenant=tenant, user=user, role=Role.ADMIN, actor=None)
_, token = tenant_services.token_issue(tenant=tenant, name="writer", role=Role.ADMIN)
print("TOKEN=" + token)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[HACluster, str]]:
    why = hacluster.missing()
    if why:
        pytest.skip(why)
    with HACluster() as ha:
        with psycopg.connect(ha.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        manage("migrate", "--no-input", "-v", "0", url=ha.url(DB))
        out = manage("shell", url=ha.url(DB), code=SEED.format(pw=PASSWORD))
        token = next(ln for ln in out.splitlines() if ln.startswith("TOKEN=")).removeprefix(
            "TOKEN="
        )
        yield ha, token


def login(base: str, username: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=20, follow_redirects=False)
    page = client.get("/login/").text
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert csrf, page[:500]
    res = client.post(
        "/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf.group(1)},
    )
    assert res.status_code == 302, res.text[:800]
    return client


def create(base: str, token: str, name: str) -> str:
    res = httpx.post(
        f"{base}/v1/schedules",
        headers={"Authorization": f"Bearer {token}"},
        json={"name": name, "cron": "0 2 * * *", "target": {"type": "http", "url": TARGET}},
        timeout=20,
    )
    assert res.status_code == 201, res.text
    return str(res.json()["id"])


def source(res: httpx.Response) -> tuple[str, float | None]:
    """(replica|primary, lag) from the X-Read-Source header of a marked page."""
    header = res.headers.get("X-Read-Source", "")
    assert header, f"no X-Read-Source on {res.request.url}"
    where = header.split(";")[0]
    lag = re.search(r"lag=([0-9.]+|inf)", header)
    return where, (float(lag.group(1)) if lag else None)


def on_standby(url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def test_lists_read_from_the_replica_within_the_bound_and_from_the_primary_beyond_it(
    cluster: tuple[HACluster, str], start: Callable[..., Proc]
) -> None:
    ha, token = cluster
    leader, standby = ha.wait_healthy(timeout=120)
    standby_url = ha.node_url(standby, DB)
    web = WebServer(
        start,
        DATABASE_URL=ha.url(DB),
        DATABASE_REPLICA_URL=standby_url,
        REPLICA_MAX_LAG_S=str(BOUND_S),
        REPLICA_PROBE_S="0",  # every request asks: the test moves the lag under it
        REPLICA_RETRY_S="0",
        TARGET_TEST_ALLOW="127.0.0.1:9",
        METRICS_PUBLIC="1",
    )
    reader = login(web.url, "reader")
    alpha = f"alpha-{uuid.uuid4().hex[:6]}"
    alpha_id = create(web.url, token, alpha)
    # The replica has alpha once it has replayed it (streaming: within moments).
    wait_for(
        lambda: on_standby(standby_url, HAS_SCHEDULE, alpha_id),
        timeout=30,
        what="the standby to replay alpha",
    )
    res = reader.get("/schedules/")
    assert res.status_code == 200
    assert source(res)[0] == "replica" and alpha in res.text
    assert 'data-source="replica"' in res.text and "Read from a replica" in res.text

    # Replay paused: the standby receives the primary's WAL but applies none of it.
    ha.pause_replay(standby)
    paused_at = time.monotonic()
    beta = f"beta-{uuid.uuid4().hex[:6]}"
    beta_id = create(web.url, token, beta)
    assert on_standby(standby_url, HAS_SCHEDULE, beta_id) is None

    pages = {
        "/schedules/": beta,
        "/runs/": "",
        "/": "",
        "/schedules/health": beta,
    }
    for path, absent in pages.items():
        res = reader.get(path)
        assert res.status_code == 200, (path, res.text[:500])
        where, lag = source(res)
        assert time.monotonic() - paused_at < BOUND_S, "the pages took longer than the bound"
        assert where == "replica", (path, res.headers["X-Read-Source"])
        assert lag is not None and lag <= BOUND_S  # to 0.1 s: 9.96 s reads "10.0"
        if absent:
            assert absent not in res.text, f"{path} listed beta: it did not read the replica"
    assert alpha in reader.get("/schedules/").text
    metrics = httpx.get(f"{web.url}/metrics", timeout=20)
    assert metrics.status_code == 200 and metrics.headers["X-Read-Source"].startswith("replica")
    assert "scheduler_reads_from_replica 1.0" in metrics.text
    assert re.search(r"^scheduler_replica_lag_seconds [0-9.e+-]+$", metrics.text, re.M)

    # Authentication is the primary's: a user made after the pause logs in at once...
    manage(
        "shell",
        url=ha.url(DB),
        code=(
            "from tenants import services as s, models as m\n"
            "from tenants.roles import Role\n"
            f"u = s.user_ensure(username='late', password={PASSWORD!r})\n"
            "s.membership_set(tenant=m.Tenant.objects.get(slug='replica-t'), user=u,"
            " role=Role.VIEWER, actor=None)\n"
        ),
    )
    late = login(web.url, "late")
    res = late.get("/schedules/")
    assert res.status_code == 200 and "late" in res.text
    # ...and an unmarked page (the schedule's own) reads beta from the primary.
    detail = reader.get(f"/schedules/{beta_id}/")
    assert detail.status_code == 200 and beta in detail.text
    assert "X-Read-Source" not in detail.headers

    # Past the bound: the same pages read from the primary and say why.
    def from_primary() -> httpx.Response | None:
        res = reader.get("/schedules/")
        return res if source(res)[0] == "primary" else None

    res = wait_for(from_primary, timeout=BOUND_S + 30, interval=0.5, what="the bound to pass")
    assert time.monotonic() - paused_at >= BOUND_S - 1, "left the replica before the bound"
    where, lag = source(res)
    # The header says the lag to 0.1 s: a lag of 10.04 s, past a 10 s bound, reads "10.0".
    assert lag is not None and lag >= BOUND_S
    assert beta in res.text and 'data-source="primary"' in res.text
    assert "Read from the primary: the replica is" in res.text
    runs = reader.get("/runs/")
    assert runs.status_code == 200 and source(runs)[0] == "primary"

    # Replay resumed: back to the replica, which now lists beta.
    ha.resume_replay(standby)

    def back_on_replica() -> httpx.Response | None:
        res = reader.get("/schedules/")
        return res if source(res)[0] == "replica" else None

    res = wait_for(back_on_replica, timeout=60, interval=0.5, what="the replica to catch up")
    assert beta in res.text

    # The standby gone: served from the primary, no error.
    ha.kill_node(standby)
    for path in ("/schedules/", "/runs/", "/", "/schedules/health"):
        res = reader.get(path)
        assert res.status_code == 200, (path, res.text[:500])
        assert source(res) == ("primary", None), res.headers["X-Read-Source"]
        assert "Read from the primary: the replica did not answer" in res.text
    assert beta in reader.get("/schedules/").text
    assert ha.leader() == leader, "the primary stays the primary"
