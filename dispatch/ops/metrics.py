"""`/metrics` for Prometheus: the platform's figures, read from PostgreSQL at scrape time.

The database is the one place every beat and worker writes to, so a scrape of
any web process sees the whole fleet (fire lag, states, fencing rejections…)
without a metrics pipeline between processes. Per-process OpenTelemetry
metrics and traces go over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
Set METRICS_TOKEN to require `Authorization: Bearer <token>` on scrapes; without
one, production serves them only with METRICS_PUBLIC=1.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from dispatch.queues import ALL_QUEUES

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
WINDOW = "15 minutes"
QUEUES = list(ALL_QUEUES)
# Lag histograms measure promptness for occurrences fired at their due time:
# catch-up runs (late on purpose) and manual runs are left out (as on /ops).
LAG_EXCLUDED_SQL = "'catch_up', 'manual'"


def _histogram(name: str, doc: str, column: str) -> HistogramMetricFamily:
    buckets_sql = ", ".join(f"count(*) FILTER (WHERE lag <= {b})" for b in LAG_BUCKETS)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {buckets_sql}, count(*), COALESCE(sum(lag), 0) FROM ("  # noqa: S608 - constants only
            f"  SELECT EXTRACT(EPOCH FROM ({column} - due_at)) AS lag FROM dispatch_execution"
            f"  WHERE {column} >= clock_timestamp() - interval '{WINDOW}'"
            f"    AND trigger NOT IN ({LAG_EXCLUDED_SQL})) AS recent"
        )
        row = cur.fetchone()
    counts, total, lag_sum = list(row[: len(LAG_BUCKETS)]), row[-2], float(row[-1])
    metric = HistogramMetricFamily(name, doc)
    metric.add_metric(
        [],
        [(str(b), float(c)) for b, c in zip(LAG_BUCKETS, counts, strict=True)]
        + [("+Inf", float(total))],
        lag_sum,
    )
    return metric


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Any]:
        yield _histogram(
            "scheduler_fire_lag_seconds",
            f"Due time to first publish, executions published in the last {WINDOW} "
            "(not catch-up or manual runs)",
            "enqueued_at",
        )
        yield _histogram(
            "scheduler_start_lag_seconds",
            f"Due time to worker start, executions started in the last {WINDOW} "
            "(not catch-up or manual runs)",
            "started_at",
        )
        with connection.cursor() as cur:
            states = GaugeMetricFamily(
                "scheduler_executions",
                "Executions scheduled in the last 24h by state",
                labels=["tenant", "state"],
            )
            cur.execute(
                "SELECT t.slug, e.state, count(*) FROM dispatch_execution e "
                "JOIN tenants_tenant t ON t.id = e.tenant_id "
                "WHERE e.scheduled_for >= clock_timestamp() - interval '24 hours' GROUP BY 1, 2"
            )
            for slug, state, n in cur.fetchall():
                states.add_metric([slug, state], n)
            yield states

            usage = GaugeMetricFamily(
                "scheduler_tenant_inflight",
                "Queued + running executions per tenant",
                labels=["tenant"],
            )
            limit = GaugeMetricFamily(
                "scheduler_tenant_max_concurrent", "Per-tenant concurrency quota", labels=["tenant"]
            )
            cur.execute(
                "SELECT t.slug, q.max_concurrent, (SELECT count(*) FROM dispatch_execution e "
                "WHERE e.tenant_id = t.id AND e.state IN ('queued', 'running')) "
                "FROM tenants_tenant t JOIN tenants_tenantquota q ON q.tenant_id = t.id WHERE t.active"
            )
            for slug, cap, inflight in cur.fetchall():
                usage.add_metric([slug], inflight)
                limit.add_metric([slug], cap)
            yield usage
            yield limit

            cur.execute(
                "SELECT count(*) FILTER (WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - "
                "interval '30 seconds'), COALESCE(sum(stale_writes_rejected), 0), "
                "COALESCE(sum(published_total), 0) FROM dispatch_beatnode"
            )
            alive, rejected, published = cur.fetchone()
            yield GaugeMetricFamily(
                "scheduler_beats_alive", "Beats with a recent heartbeat", value=alive
            )
            yield CounterMetricFamily(
                "scheduler_beat_stale_writes_rejected",
                "Beat writes refused by the partition epoch fence",
                value=rejected,
            )
            yield CounterMetricFamily(
                "scheduler_dispatched", "Executions published by beats", value=published
            )
            cur.execute(
                "SELECT COALESCE(sum(epoch), 0), count(*) FILTER (WHERE owner <> '') "
                "FROM dispatch_schedulerpartition"
            )
            epochs, owned = cur.fetchone()
            yield CounterMetricFamily(
                "scheduler_partition_ownership_changes",
                "Partition takeovers (sum of epochs)",
                value=epochs,
            )
            yield GaugeMetricFamily(
                "scheduler_partitions_owned", "Partitions with a live owner", value=owned
            )

            events = CounterMetricFamily(
                "scheduler_execution_events",
                "Execution events in the last 24h by kind",
                labels=["kind"],
            )
            cur.execute(
                "SELECT kind, count(*) FROM dispatch_executionevent "
                "WHERE at >= clock_timestamp() - interval '24 hours' GROUP BY 1"
            )
            for kind, n in cur.fetchall():
                events.add_metric([kind], n)
            yield events
        yield from self._queue_depths()

    def _queue_depths(self) -> Iterator[Any]:
        broker: str = settings.CELERY_BROKER_URL
        if not broker.startswith(("redis://", "rediss://", "redis+socket://")):
            return
        import redis

        url = broker.replace("redis+socket://", "unix://")
        depth = GaugeMetricFamily(
            "scheduler_queue_depth", "Messages waiting per Celery queue", labels=["queue"]
        )
        try:
            client = redis.Redis.from_url(url, socket_timeout=2)
            for name in QUEUES:
                depth.add_metric([name], int(client.llen(name)))
        except redis.RedisError:
            return
        yield depth


def metrics_view(request: HttpRequest) -> HttpResponse:
    token: str = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            response = HttpResponse(
                "metrics token required\n", status=401, content_type="text/plain"
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    elif not settings.METRICS_PUBLIC:
        # Production without a token: every tenant's slug and counts would be public.
        return HttpResponse(
            "metrics are not public: set METRICS_TOKEN (or METRICS_PUBLIC=1)\n",
            status=403,
            content_type="text/plain",
        )
    registry = CollectorRegistry()
    registry.register(DatabaseCollector())
    return HttpResponse(
        generate_latest(registry), content_type="text/plain; version=0.0.4; charset=utf-8"
    )
