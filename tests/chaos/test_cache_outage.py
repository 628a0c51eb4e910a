"""Redis as the cache (daily quotas, per-host rate limits, API throttles, delivery
counters) killed and restarted while jobs fire: what degrades, and that nothing
is lost or stuck.

The broker is a second Redis of the test's own, so the outage hurts the cache
only. Three batches of `BATCH` one-off jobs, all due at once, against a tenant
allowed `QUOTA` executions a day and a target host limited to `RATE`:

* A — cache up: the quota skips the excess (`quota_exhausted`), the rate limit
  spreads the calls over ≥ (QUOTA - 1) / rate seconds;
* H — cache black-holed (a TCP proxy that keeps the connections and answers
  nothing): every cache call waits out its 2 s socket timeout, then both fail
  open as below — the day's count (already at QUOTA) is not enforced, every job
  runs, nothing hangs;
* B — cache down (SIGKILL): both fail open — every job runs, the calls go as
  fast as the workers can make them, the API answers 200 without throttling;
* C — cache back, empty (no persistence): both are enforced again, from zero —
  the day's count is forgotten, so the tenant gets a fresh QUOTA that day.

Nothing is lost (every job ends succeeded or skipped by the quota, none stays
scheduled/queued/running), no delivery is duplicated, every process is alive
and keeps firing after the restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

from dispatch.models import Execution
from dispatch.worker import ratelimit
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.chaos import harness
from tests.chaos.servers import OwnRedis, Postgres
from tests.support.faultproxy import FaultProxy
from tests.support.ledger import Ledger
from tests.support.procs import processes, wait_for
from tests.support.worker_support import purge

pytestmark = [
    pytest.mark.system,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

BATCH = 12
QUOTA = 8  # executions per day
RATE = "1/s"  # per target host: burst 1, one slot a second
API_RATE = "3/min"


class ProxiedRedis:
    """The cache as the processes see it: through a fault proxy (kill/start still
    act on the server itself)."""

    def __init__(self, server: OwnRedis, proxy: FaultProxy) -> None:
        self.server, self.proxy = server, proxy

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.proxy.port}/{db}"

    def kill(self) -> None:
        self.server.kill()

    def start(self) -> None:
        self.server.start()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[OwnRedis, OwnRedis]]:
    broker, cache = OwnRedis(tmp_path / "broker"), OwnRedis(tmp_path / "cache")
    broker.start()
    cache.start()
    yield broker, cache
    cache.stop()
    broker.stop()


def _batch(principal: Principal, url: str, tag: str) -> list[str]:
    run_at = harness.db_now() + timedelta(seconds=2)
    return [
        harness._job_to(
            principal,
            name=f"cache-{tag}-{i}",
            run_at=run_at,
            url=url,
            retry=harness.RETRY,
            timeout_s=10,
        )
        for i in range(BATCH)
    ]


def _final(ids: list[str]) -> bool:
    return (
        Execution.objects.filter(schedule_id__in=ids, state__in=("succeeded", "skipped")).count()
        >= BATCH
    )


def _outcome(ids: list[str], ledger: Ledger) -> dict[str, Any]:
    rows = list(Execution.objects.filter(schedule_id__in=ids).values("id", "state", "reason_code"))
    eids = {str(r["id"]) for r in rows}
    starts = sorted(
        req["at"]
        for req in ledger.requests
        if {k.lower(): v for k, v in req["headers"].items()}.get("x-execution-id") in eids
    )
    return {
        "records": len(rows),
        "succeeded": sum(r["state"] == "succeeded" for r in rows),
        "skipped_by_quota": sum(
            r["state"] == "skipped" and r["reason_code"] == "quota_exhausted" for r in rows
        ),
        "calls": len(starts),
        "calls_spread_s": round(starts[-1] - starts[0], 2) if starts else 0.0,
    }


def _api_statuses(token: str, cache_url: str, n: int) -> list[int]:
    """n API requests of one token against the test's cache, from a fresh client."""
    with override_settings(REDIS_URL=cache_url, API_RATE_LIMIT=API_RATE):
        ratelimit._client = None  # the process's client follows REDIS_URL again
        try:
            client = Client(raise_request_exception=False)
            return [
                client.get("/v1/schedules", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
                for _ in range(n)
            ]
        finally:
            ratelimit._client = None


@pytest.mark.timeout(300)
def test_cache_outage_degrades_open_and_loses_nothing(
    tmp_path: Path,
    servers: tuple[OwnRedis, OwnRedis],
    admin_principal: Principal,
    tenant: Tenant,
) -> None:
    broker, cache = servers
    tenant.quota.max_executions_per_day = QUOTA
    tenant.quota.max_schedules = 3 * BATCH + 10
    tenant.quota.max_concurrent = 3 * BATCH + 10
    tenant.quota.save()
    purge(broker.url(0))
    ledger = Ledger(harness.respond)
    with FaultProxy(("127.0.0.1", cache.port)) as proxy, processes(tmp_path) as start:
        seen = ProxiedRedis(cache, proxy)
        cluster = harness.Cluster(
            start,
            ledger,
            log_dir=tmp_path,
            redis=seen,  # type: ignore[arg-type]
            broker_url=broker.url(0),
            pg=Postgres(),
            api_token="",
        )
        beat = cluster.add_beat()
        cluster.wait_even_split(settings.SCHEDULER_PARTITIONS)
        workers = [cluster.add_worker(TARGET_RATE_PER_HOST=RATE) for _ in range(2)]
        url = f"{ledger.url}/effect"
        _, token = tenant_services.token_issue(tenant=tenant, name="cache", role=Role.VIEWER)
        results: dict[str, Any] = {}

        a = _batch(admin_principal, url, "a")
        wait_for(lambda: _final(a), timeout=60, interval=0.3, what="batch A to end")
        results["A_cache_up"] = _outcome(a, ledger)

        proxy.blackhole()
        h = _batch(admin_principal, url, "h")
        wait_for(lambda: _final(h), timeout=120, interval=0.3, what="batch H to end")
        results["H_cache_black_holed"] = _outcome(h, ledger)
        results["H_cache_black_holed"]["api_statuses"] = _api_statuses(token, seen.url(1), 3)
        proxy.pass_()

        cache.kill()
        b = _batch(admin_principal, url, "b")
        wait_for(lambda: _final(b), timeout=60, interval=0.3, what="batch B to end")
        results["B_cache_down"] = _outcome(b, ledger)
        results["B_cache_down"]["api_statuses"] = _api_statuses(token, cache.url(1), 5)

        cache.start()
        c = _batch(admin_principal, url, "c")
        wait_for(lambda: _final(c), timeout=60, interval=0.3, what="batch C to end")
        results["C_cache_back_empty"] = _outcome(c, ledger)
        results["C_cache_back_empty"]["api_statuses"] = _api_statuses(token, cache.url(1), 5)

        alive = {n: p.alive() for n, p in {**cluster.beats, **cluster.workers}.items()}
        beat_log = cluster.beats[beat].output()
        worker_logs = "".join(cluster.workers[w].output() for w in workers)
    ledger.close()
    purge(broker.url(0))
    print(f"\n[cache outage] {results}\nprocesses alive: {alive} (logs: {tmp_path})")

    a_out, h_out, b_out, c_out = (
        results["A_cache_up"],
        results["H_cache_black_holed"],
        results["B_cache_down"],
        results["C_cache_back_empty"],
    )
    # Nothing lost or stuck: every occurrence ended, once, and the fleet is alive.
    unfinished = Execution.objects.filter(schedule_id__in=a + h + b + c).exclude(
        state__in=("succeeded", "skipped")
    )
    assert not unfinished.exists(), list(unfinished.values("id", "state"))
    for out in (a_out, h_out, b_out, c_out):
        assert out["records"] == BATCH, out
        assert out["calls"] == out["succeeded"], out  # one call per execution, no duplicate
    assert all(alive.values()), alive
    # Cache up: the quota and the rate limit hold.
    assert a_out["succeeded"] == QUOTA and a_out["skipped_by_quota"] == BATCH - QUOTA, a_out
    assert a_out["calls_spread_s"] >= QUOTA - 2, a_out
    # Cache black-holed: every call times out (2 s), then fails open: nothing hangs.
    assert h_out["succeeded"] == BATCH and h_out["skipped_by_quota"] == 0, h_out
    assert h_out["api_statuses"] == [200] * 3, h_out
    # Cache down: both fail open (the firing path's availability comes first), and say so.
    assert b_out["succeeded"] == BATCH and b_out["skipped_by_quota"] == 0, b_out
    assert b_out["calls_spread_s"] < QUOTA - 2, b_out
    assert "daily quota not enforced this batch" in beat_log
    assert "rate limiter unavailable" in worker_logs
    assert b_out["api_statuses"] == [200] * 5, b_out  # API throttle fails open too
    # Cache back, empty: enforced again, counting from zero (today's count was forgotten).
    assert c_out["succeeded"] == QUOTA and c_out["skipped_by_quota"] == BATCH - QUOTA, c_out
    assert c_out["calls_spread_s"] >= QUOTA - 2, c_out
    assert c_out["api_statuses"] == [200, 200, 200, 429, 429], c_out
