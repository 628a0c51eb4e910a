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
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from core import redis_urls, replicas
from core.replicas import reads
from dispatch.queues import ALL_QUEUES
from dispatch.selectors.ops import LAG_EXCLUDED_TRIGGERS
from dispatch.sql import sql

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
WINDOW = "15 minutes"
WINDOW_S = 15 * 60
DAY_S = 24 * 3600
# A beat is alive while its heartbeat is younger than this.
BEAT_ALIVE_S = 30
QUEUES = list(ALL_QUEUES)
# Lag histograms measure promptness for occurrences fired at their due time:
# the triggers /ops leaves out (catch-up, manual, backfill) are left out here too.
LAG_EXCLUDED = [str(t.value) for t in LAG_EXCLUDED_TRIGGERS]


def _histogram(name: str, doc: str, measure: str) -> HistogramMetricFamily:
    params = {
        "measure": measure,
        "window_s": WINDOW_S,
        "excluded": LAG_EXCLUDED,
        "buckets": list(LAG_BUCKETS),
    }
    row = sql.rows("metrics_lag", params, using=reads())[0]  # aggregates: always one row
    metric = HistogramMetricFamily(name, doc)
    metric.add_metric(
        [],
        [(str(b), float(c)) for b, c in zip(LAG_BUCKETS, row.counts, strict=True)]
        + [("+Inf", float(row.total))],
        float(row.lag_sum),
    )
    return metric


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Any]:
        yield _histogram(
            "scheduler_fire_lag_seconds",
            f"Due time to first publish, executions published in the last {WINDOW} "
            "(not catch-up, manual or backfill runs)",
            "fire",
        )
        yield _histogram(
            "scheduler_start_lag_seconds",
            f"Due time to worker start, executions started in the last {WINDOW} "
            "(not catch-up, manual or backfill runs)",
            "start",
        )
        states = GaugeMetricFamily(
            "scheduler_executions",
            "Executions scheduled in the last 24h by state",
            labels=["tenant", "state"],
        )
        for row in sql.rows("metrics_executions_by_state", {"window_s": DAY_S}, using=reads()):
            states.add_metric([row.slug, row.state], row.n)
        yield states

        usage = GaugeMetricFamily(
            "scheduler_tenant_inflight",
            "Queued + running executions per tenant",
            labels=["tenant"],
        )
        limit = GaugeMetricFamily(
            "scheduler_tenant_max_concurrent", "Per-tenant concurrency quota", labels=["tenant"]
        )
        for row in sql.rows("metrics_tenant_inflight", using=reads()):
            usage.add_metric([row.slug], row.inflight)
            limit.add_metric([row.slug], row.max_concurrent)
        yield usage
        yield limit

        beats = sql.rows("metrics_beats", {"alive_s": BEAT_ALIVE_S}, using=reads())[0]
        yield GaugeMetricFamily(
            "scheduler_beats_alive", "Beats with a recent heartbeat", value=beats.alive
        )
        yield CounterMetricFamily(
            "scheduler_beat_stale_writes_rejected",
            "Beat writes refused by the partition epoch fence",
            value=beats.rejected,
        )
        yield CounterMetricFamily(
            "scheduler_dispatched", "Executions published by beats", value=beats.published
        )
        yield GaugeMetricFamily(
            "scheduler_beats_standby",
            "Live beats standing by: they could not publish and handed their partitions over",
            value=beats.standby,
        )
        yield CounterMetricFamily(
            "scheduler_beat_publish_handovers",
            "Hand-overs of a beat's partitions after it could not publish "
            "for BEAT_PUBLISH_STALL_S with work due",
            value=beats.handovers,
        )
        partitions = sql.rows("metrics_partitions", using=reads())[0]
        yield CounterMetricFamily(
            "scheduler_partition_ownership_changes",
            "Partition takeovers (sum of epochs)",
            value=partitions.epochs,
        )
        yield GaugeMetricFamily(
            "scheduler_partitions_owned", "Partitions with a live owner", value=partitions.owned
        )

        events = CounterMetricFamily(
            "scheduler_execution_events",
            "Execution events in the last 24h by kind",
            labels=["kind"],
        )
        for row in sql.rows("metrics_events_by_kind", {"window_s": DAY_S}, using=reads()):
            events.add_metric([row.kind], row.n)
        yield events
        yield from self._queue_depths()
        yield from self._read_source()

    def _read_source(self) -> Iterator[Any]:
        """With a replica configured: where this scrape read from, and the replica's lag."""
        source = replicas.current()
        if source is None:
            return
        yield GaugeMetricFamily(
            "scheduler_reads_from_replica",
            "1 when this scrape read from the replica, 0 when from the primary",
            value=1 if source.replica else 0,
        )
        if source.lag_s is not None:
            yield GaugeMetricFamily(
                "scheduler_replica_lag_seconds",
                "The replica's replay lag in seconds when last probed (REPLICA_MAX_LAG_S is the bound)",
                value=source.lag_s,
            )

    def _queue_depths(self) -> Iterator[Any]:
        broker: str = settings.CELERY_BROKER_URL
        if not redis_urls.is_redis(broker):
            return
        import redis

        url = redis_urls.redis_py_url(broker)
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


@replicas.replica_reads
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
