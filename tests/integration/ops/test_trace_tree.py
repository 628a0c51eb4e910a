"""One execution's span tree, beat to target call: the trace context rides in the
Celery message and reaches the target as `traceparent`."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Connection, Queue
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import telemetry
from dispatch import services
from dispatch.models import Execution
from dispatch.scheduler.loop import Beat, BeatConfig
from dispatch.worker import runner
from tenants.roles import Principal
from tests.support.ledger import Ledger


@pytest.mark.django_db(transaction=True)
def test_span_tree_from_beat_to_target_call(admin_principal: Principal, settings: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ledger = Ledger()
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    try:
        with Connection(settings.CELERY_BROKER_URL) as conn:
            Queue("default.short", durable=True, auto_delete=False)(conn.default_channel).declare()
            conn.default_channel.queue_purge("default.short")
        job, _ = services.job_create(
            actor=admin_principal,
            data={"name": "traced", "target": {"type": "http", "url": f"{ledger.url}/hook"}},
        )
        beat = Beat(
            BeatConfig(name="trace-beat", partitions=settings.SCHEDULER_PARTITIONS, lookahead_s=5)
        )
        beat.start()
        try:
            beat.cycle()
        finally:
            beat.shutdown()
        execution = Execution.objects.get(schedule=job)
        # The worker side, as Celery's instrumentation does it: continue the
        # trace found in the message headers, then run the task.
        with Connection(settings.CELERY_BROKER_URL) as conn:
            q = conn.SimpleQueue(
                Queue("default.short", durable=True, auto_delete=False), no_ack=True
            )
            message = q.get(timeout=5)
            q.close()
        assert message.payload[0] == [str(execution.id), 1]
        assert "traceparent" in message.headers
        parent_ctx = propagate.extract(message.headers)
        with telemetry.tracer.start_as_current_span(
            "run/dispatch.run_execution", context=parent_ctx
        ):
            assert runner.run_execution(execution_id=str(execution.id), attempt=1) == "succeeded"
    finally:
        ledger.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    publish, task = spans["beat.publish"], spans["run/dispatch.run_execution"]
    attempt, call = spans["execution.attempt"], spans["target.call"]
    trace_id = publish.context.trace_id
    assert {task.context.trace_id, attempt.context.trace_id, call.context.trace_id} == {trace_id}
    assert spans["beat.cycle"].context.span_id == publish.parent.span_id
    assert task.parent.span_id == publish.context.span_id
    assert attempt.parent.span_id == task.context.span_id
    assert call.parent.span_id == attempt.context.span_id
    assert attempt.attributes["scheduler.execution_id"] == str(execution.id)
    assert (
        attempt.attributes["scheduler.attempt"] == 1
        and attempt.attributes["scheduler.result"] == "succeeded"
    )
    assert call.attributes["scheduler.target"] == "http"
    received = ledger.requests[0]["headers"]
    traceparent = received.get("traceparent") or received.get("Traceparent")
    version, tid, parent_span, flags = traceparent.split("-")
    assert (version, tid, parent_span) == ("00", f"{trace_id:032x}", f"{call.context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled
