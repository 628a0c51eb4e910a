"""The beat's raw publish path (issue 19): the bytes it builds ahead are the message
kombu would have sent, and a real Celery worker runs an execution published that way.

Real brokers: the embedded Redis (or whatever CELERY_BROKER_URL is) and, with
RABBITMQ_URL set, RabbitMQ."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Queue
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from config import telemetry
from config.celery_app import amqp_queue, is_amqp
from dispatch.models import Execution
from dispatch.scheduler.envelopes import TASK_NAME
from dispatch.scheduler.firing import Pending
from dispatch.scheduler.publish import AmqpPublisher, RedisPublisher, publisher_for
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import wait_for
from tests.support.worker_support import (
    final,
    make_execution,
    make_schedule,
    purge,
    state_of,
    worker_processes,
)

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "")
EXECUTION = "0b5f6c1e-8d2a-4c1b-9e37-5a4f0d3c2b1a"


@pytest.fixture(autouse=True)
def traced() -> None:
    """A recording tracer provider, so messages carry a real `traceparent` to splice."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())


@pytest.fixture
def scratch() -> str:
    return f"scratch.rawpub.{uuid.uuid4().hex[:8]}"


def kombu_publish(broker: str, p: Pending, queue: Queue, priority: int | None) -> None:
    """The path the beat took before issue 19, as it was: kombu's Producer.publish
    of Celery's protocol-2 template, inside a `beat.publish` span."""
    from config.celery_app import app

    msg = app.amqp.as_task_v2(
        str(uuid.uuid4()), TASK_NAME, args=[p.id, p.attempt], kwargs={}, ignore_result=True
    )
    headers, properties, embed = dict(msg.headers), dict(msg.properties), msg.body[2]
    task_id = str(uuid.uuid4())
    extra = {} if priority is None else {"priority": priority}
    with (
        telemetry.tracer.start_as_current_span("beat.publish"),
        Connection(broker) as conn,
        conn.Producer() as producer,
    ):
        producer.publish(
            [[p.id, p.attempt], {}, embed],
            exchange="",
            routing_key=queue.name,
            serializer="json",
            headers=headers
            | telemetry.inject({})
            | {"id": task_id, "root_id": task_id, "argsrepr": repr([p.id, p.attempt])},
            correlation_id=task_id,
            reply_to=properties.get("reply_to") or "",
            delivery_mode=2,
            declare=[queue],
            retry=False,
            **extra,
        )


def keys(value: Any) -> Any:
    """The structure of a JSON value: its objects' keys in order, recursively."""
    if isinstance(value, dict):
        return [(k, keys(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [keys(v) for v in value]
    return type(value).__name__


PER_MESSAGE = ("id", "root_id", "traceparent", "tracestate")


def test_redis_bytes_are_kombus_message(settings: Any, scratch: str) -> None:
    broker = settings.CELERY_BROKER_URL
    if is_amqp(broker):
        pytest.skip("the configured broker is not Redis")
    from config.celery_app import app

    p = Pending(0, EXECUTION, 3, scratch, 1, 0)
    kombu_publish(broker, p, app.amqp.queues[scratch], None)
    raw = RedisPublisher(beat="rawpub-test")
    raw.prepare([p, Pending(0, str(uuid.uuid4()), 1, scratch, 1, 0)])
    raw.forget([p.id])
    assert raw.kept == 1  # forget drops only the named executions' bytes
    raw.prepare([p])
    assert raw.kept == 2
    assert raw.publish([p]) == [p]
    assert raw.kept == 1  # what was sent is not kept
    with Connection(broker) as conn:
        client = conn.default_channel.client
        try:
            # LPUSH puts the newest first: [raw, kombu].
            ours, theirs = (json.loads(m) for m in client.lrange(scratch, 0, -1))
        finally:
            client.delete(scratch)
    assert keys(ours) == keys(theirs)  # same members, same order, same types
    assert ours["headers"]["traceparent"].startswith("00-")
    for m in (ours, theirs):
        for k in PER_MESSAGE:
            m["headers"].pop(k, None)
        for k in ("correlation_id", "delivery_tag"):
            m["properties"].pop(k)
    assert ours == theirs  # the base64 body included: identical bytes
    assert ours["properties"]["delivery_info"]["routing_key"] == scratch


def test_amqp_message_is_kombus_message(settings: Any, scratch: str) -> None:
    if not RABBITMQ_URL:
        pytest.skip("RABBITMQ_URL not set")
    settings.CELERY_BROKER_URL = RABBITMQ_URL
    name = "high.short"  # a priority level: the duration class's queue, a message priority
    queue, level = amqp_queue(name)
    purge(RABBITMQ_URL)
    p = Pending(0, EXECUTION, 2, name, 1, 0)
    kombu_publish(RABBITMQ_URL, p, queue, level or 0)
    raw = AmqpPublisher(beat="rawpub-test", io_timeout_s=2)
    raw.prepare([p])
    try:
        assert raw.publish([p]) == [p]
    finally:
        raw._reset()
    got = []
    with Connection(RABBITMQ_URL) as conn:
        channel = conn.default_channel
        for _ in range(2):
            got.append(wait_for(lambda: channel.basic_get(queue.name, no_ack=True), timeout=5))
    purge(RABBITMQ_URL)
    theirs, ours = got  # FIFO within one priority level
    assert ours.body == theirs.body and json.loads(ours.body) == [[EXECUTION, 2], {}, ANY_EMBED]
    their_props, our_props = dict(theirs.properties), dict(ours.properties)
    their_h, our_h = their_props.pop("application_headers"), our_props.pop("application_headers")
    assert our_h["traceparent"].startswith("00-")
    assert list(our_h) == list(their_h)
    assert our_props.pop("correlation_id") == our_h["id"]
    their_props.pop("correlation_id")
    for h in (our_h, their_h):
        for k in PER_MESSAGE:
            h.pop(k, None)
    assert our_h == their_h and our_props == their_props
    assert our_props["priority"] == level


class _Any:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict)


ANY_EMBED = _Any()


@pytest.fixture(params=["configured", "rabbitmq"])
def broker(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    if request.param == "rabbitmq":
        if not RABBITMQ_URL or is_amqp(settings.CELERY_BROKER_URL):
            pytest.skip("RABBITMQ_URL not set (or already the configured broker)")
        settings.CELERY_BROKER_URL = RABBITMQ_URL
    purge(settings.CELERY_BROKER_URL)
    yield settings.CELERY_BROKER_URL
    purge(settings.CELERY_BROKER_URL)


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_runs_executions_published_raw(
    broker: str, admin_principal: Principal, tmp_path: Path
) -> None:
    with Ledger() as ledger, worker_processes(tmp_path) as start:
        start("rawpub-w", queues="high.short,default.short", TARGET_TEST_ALLOW=ledger.allow_entry)
        schedule = make_schedule(admin_principal, {"type": "http", "url": f"{ledger.url}/hook"})
        prepared, on_the_spot = make_execution(schedule), make_execution(schedule)
        items = [
            Pending(0, str(prepared.id), 1, "high.short", schedule.tenant_id, 0),
            Pending(0, str(on_the_spot.id), 1, "default.short", schedule.tenant_id, 0),
        ]
        publisher = publisher_for(broker, beat="rawpub-test", io_timeout_s=2)
        publisher.prepare(items[:1])  # built ahead; the other is built at publish time
        publisher.forget(["not-an-execution"])  # forgetting others keeps it
        assert publisher.publish(items) == items
        for ex in (prepared, on_the_spot):
            wait_for(final(ex), timeout=30, what=f"{ex.id} to finish")
            assert state_of(ex) == "succeeded"
        assert len(ledger.requests) == 2
        assert (
            Execution.objects.filter(pk__in=[prepared.pk, on_the_spot.pk], attempt=1).count() == 2
        )
