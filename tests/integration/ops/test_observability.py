"""/metrics after a real firing run; JSON logs carry ids; the beat's spans carry the trace into messages."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest
from django.test import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config.logs import JsonFormatter, log_context
from dispatch import services
from dispatch.models import Execution
from dispatch.queues import ALL_QUEUES
from dispatch.scheduler.loop import Beat, BeatConfig
from tenants.roles import Principal

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.mark.django_db(transaction=True)
def test_metrics_show_fire_lag_after_a_run(
    admin_principal: Principal, spans: InMemorySpanExporter, settings: Any
) -> None:
    for i in range(3):
        services.job_create(actor=admin_principal, data={"target": TARGET, "name": f"m{i}"})
    beat = Beat(
        BeatConfig(name="metrics-beat", partitions=settings.SCHEDULER_PARTITIONS, lookahead_s=5)
    )
    beat.start()
    try:
        beat.cycle()
    finally:
        beat.shutdown()
    assert Execution.objects.filter(state="queued").count() == 3
    body = Client().get("/metrics").content.decode()
    assert "scheduler_fire_lag_seconds_count 3.0" in body
    assert 'scheduler_fire_lag_seconds_bucket{le="+Inf"} 3.0' in body
    assert 'scheduler_executions{state="queued",tenant="billing"} 3.0' in body
    assert 'scheduler_tenant_inflight{tenant="billing"} 3.0' in body
    assert "scheduler_partition_ownership_changes_total" in body
    if settings.CELERY_BROKER_URL.startswith(("redis", "unix")):
        # Read through redis-py with the broker URL converted (embedded: a socket URL);
        # a Redis error drops the family, so one line per queue proves the connection.
        # (Not the depth itself: a stray worker of another test may drain the queue.)
        depths = re.findall(r'^scheduler_queue_depth\{queue="([^"]+)"\} \d', body, re.M)
        assert sorted(depths) == sorted(ALL_QUEUES), body
    # The beat's own spans: a cycle containing the claim batch and the publish.
    names = {s.name for s in spans.get_finished_spans()}
    assert {"beat.cycle", "beat.claim_batch", "beat.publish"} <= names
    publish = next(s for s in spans.get_finished_spans() if s.name == "beat.publish")
    cycle = next(
        s
        for s in spans.get_finished_spans()
        if s.name == "beat.cycle" and s.context.trace_id == publish.context.trace_id
    )
    assert publish.parent is not None and publish.parent.span_id == cycle.context.span_id
    assert publish.attributes["scheduler.messages"] == 3


@pytest.mark.django_db
def test_metrics_token_is_enforced_when_set(settings: Any) -> None:
    settings.METRICS_TOKEN = "s3cret-scrape"
    assert Client().get("/metrics").status_code == 401
    ok = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape")
    assert ok.status_code == 200 and b"scheduler_beats_alive" in ok.content


def test_json_logs_carry_context_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.jsonlogs")
    logger.addHandler(handler)
    logger.propagate = False
    with log_context(execution_id="e-1", schedule_id="s-1", tenant="billing"):
        logger.warning("attempt %d failed", 2)
    logger.warning("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "attempt 2 failed" and first["level"] == "warning"
    assert (first["execution_id"], first["schedule_id"], first["tenant"]) == (
        "e-1",
        "s-1",
        "billing",
    )
    assert "execution_id" not in second and second["msg"] == "outside"
