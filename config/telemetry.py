"""OpenTelemetry set-up for web, beat and workers.

Traces are exported over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT is
set; otherwise spans are created (so the trace context still travels from the
firing to the target call) but nothing leaves the process. Celery workers
call `setup` after fork (worker_process_init), since the exporter's thread and
socket do not survive a fork.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

_lock = threading.Lock()
_done = False
tracer = trace.get_tracer("scheduler")


def setup(service: str, *, extra_processor: SpanProcessor | None = None) -> None:
    """Install the tracer provider and library instrumentation once per process."""
    global _done
    with _lock:
        if _done:
            return
        name = os.environ.get("OTEL_SERVICE_NAME", "scheduler")
        provider = TracerProvider(resource=Resource.create({"service.name": f"{name}-{service}"}))
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if extra_processor is not None:
            provider.add_span_processor(extra_processor)
        trace.set_tracer_provider(provider)
        _instrument(service)
        _done = True


def _instrument(service: str) -> None:
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    PsycopgInstrumentor().instrument(skip_dep_check=True)
    if service == "web":
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument()
    if service == "worker":
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


def inject(headers: dict[str, Any]) -> dict[str, Any]:
    """Add the current trace context (traceparent) to outgoing message or HTTP headers."""
    propagate.inject(headers)
    return headers


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""
