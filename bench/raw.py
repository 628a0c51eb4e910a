"""Raw publish ceilings that share no code with the beat.

The beat's own publish rate says how fast the beat publishes, not how fast the
broker takes messages; a ratio against it says little. These are the broker's
ceilings for the same messages:

* Redis: ONE real Celery protocol-2 envelope is made by publishing a message
  with Celery/kombu to a scratch queue and reading it back with redis-py; n
  byte-identical copies with fresh ids are made before the clock starts, then
  pushed with pipelined LPUSH (chunks of 1,000) — no kombu per message.
* RabbitMQ: the same protocol-2 body, headers and properties as py-amqp
  messages built before the clock starts, published with `basic_publish` on
  one channel in confirm mode, the broker's acks awaited per window of 1,000
  (the guarantee the beat keeps: a window counts only once acknowledged).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any
from urllib.parse import unquote, urlparse

from django.conf import settings

from bench.common import BenchError
from core.redis_urls import kombu_url, redis_py_url

TASK_NAME = "dispatch.run_execution"
WINDOW = 1000
SCRATCH = "bench.raw.scratch"
TARGET = "bench.raw.target"


def _task_template() -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Celery's own protocol-2 headers, properties and embed for the beat's task."""
    from config.celery_app import app

    task_id = str(uuid.uuid4())
    msg = app.amqp.as_task_v2(task_id, TASK_NAME, args=(0, 1), kwargs={}, ignore_result=True)
    return dict(msg.headers), dict(msg.properties), msg.body[2]


def redis_envelope(url: str) -> bytes:
    """One real envelope: published by kombu to a scratch queue, read back raw."""
    import redis
    from kombu import Connection, Queue

    headers, properties, embed = _task_template()
    task_id = str(uuid.uuid4())
    client = redis.Redis.from_url(redis_py_url(url), socket_timeout=10)
    try:
        client.delete(SCRATCH)
        with Connection(kombu_url(url)) as conn:
            producer = conn.Producer()
            producer.publish(
                [[0, 1], {}, embed],
                exchange="",
                routing_key=SCRATCH,
                serializer="json",
                headers=headers | {"id": task_id, "root_id": task_id},
                correlation_id=task_id,
                reply_to=properties.get("reply_to") or "",
                delivery_mode=2,
                declare=[Queue(SCRATCH, durable=True, auto_delete=False)],
                retry=False,
            )
        raw = client.rpop(SCRATCH)
        if not isinstance(raw, bytes):
            raise BenchError(f"raw publish: the scratch queue {SCRATCH!r} held no envelope")
        return raw
    finally:
        client.delete(SCRATCH)
        client.close()


def _fresh_copies(envelope: bytes, n: int) -> list[bytes]:
    """n copies identical to `envelope` but for the task id and the delivery tag."""
    doc = json.loads(envelope)
    task_id = doc["headers"]["id"].encode()
    tag = doc["properties"]["delivery_tag"].encode()
    parts = [p.split(tag) for p in envelope.split(task_id)]
    copies = []
    for _ in range(n):
        new_id, new_tag = str(uuid.uuid4()).encode(), str(uuid.uuid4()).encode()
        copies.append(new_id.join(new_tag.join(p) for p in parts))
    return copies


def redis_publish_per_s(n: int, url: str | None = None) -> float:
    import redis

    url = url or settings.CELERY_BROKER_URL
    copies = _fresh_copies(redis_envelope(url), n)
    client = redis.Redis.from_url(redis_py_url(url), socket_timeout=30)
    try:
        client.delete(TARGET)
        t0 = time.perf_counter()
        for start in range(0, n, WINDOW):
            pipe = client.pipeline(transaction=False)
            pipe.lpush(TARGET, *copies[start : start + WINDOW])
            pipe.execute()
        elapsed = time.perf_counter() - t0
        pushed = int(client.llen(TARGET))
    finally:
        client.delete(TARGET)
        client.close()
    if pushed != n:
        raise BenchError(f"raw publish: {pushed} of {n} envelopes reached Redis")
    return n / elapsed


def _amqp_params(url: str) -> dict[str, Any]:
    u = urlparse(url)
    vhost = unquote(u.path[1:]) if u.path and u.path != "/" else "/"
    return {
        "host": f"{u.hostname or '127.0.0.1'}:{u.port or 5672}",
        "userid": unquote(u.username or "guest"),
        "password": unquote(u.password or "guest"),
        "virtual_host": vhost or "/",
        "connect_timeout": 10,
    }


def amqp_publish_per_s(n: int, url: str) -> float:
    import amqp

    headers, _properties, embed = _task_template()
    queue = "bench.raw"
    messages = []
    for _ in range(n):
        task_id = str(uuid.uuid4())
        body = json.dumps([[0, 1], {}, embed]).encode()
        messages.append(
            amqp.Message(
                body,
                content_type="application/json",
                content_encoding="utf-8",
                delivery_mode=2,
                correlation_id=task_id,
                priority=0,
                application_headers=headers | {"id": task_id, "root_id": task_id},
            )
        )
    conn = amqp.Connection(**_amqp_params(url))
    conn.connect()
    try:
        channel: Any = conn.channel()  # py-amqp: confirm_select, events
        channel.queue_declare(queue, durable=True, auto_delete=False)
        channel.queue_purge(queue)
        channel.confirm_select()
        state = {"acked": 0, "nacked": 0}

        def on_ack(tag: int, multiple: bool) -> None:
            state["acked"] = max(state["acked"], tag)

        def on_nack(tag: int, multiple: bool) -> None:
            state["nacked"] = tag

        channel.events["basic_ack"].add(on_ack)
        channel.events["basic_nack"].add(on_nack)
        sent = 0
        t0 = time.perf_counter()
        for start in range(0, n, WINDOW):
            for message in messages[start : start + WINDOW]:
                channel.basic_publish(message, exchange="", routing_key=queue)
            sent += len(messages[start : start + WINDOW])
            deadline = time.monotonic() + 30
            while state["acked"] < sent and not state["nacked"]:
                if time.monotonic() > deadline:
                    raise BenchError("raw publish: confirms did not arrive within 30 s")
                conn.drain_events(timeout=5)
            if state["nacked"]:
                raise BenchError(f"raw publish: RabbitMQ refused messages (nack {state['nacked']})")
        elapsed = time.perf_counter() - t0
        channel.queue_delete(queue)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    return n / elapsed
