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
  channels in confirm mode to one durable queue, in windows of 1,000 (the
  guarantee the beat keeps: a window counts only once acknowledged), in each
  layout of `AMQP_LAYOUTS`: one channel awaiting each window's acks before the
  next, and pipelined windows on one or several channels and connections. The
  best layout is the ceiling. The best layout is also measured into a priority
  queue like the beat's (`x-max-priority`), which RabbitMQ serves more slowly.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import deque
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


# How the raw RabbitMQ figure is measured: (connections, channels per connection,
# windows a channel keeps awaiting their confirms). Depth 1 is "publish a window,
# await its acks" (the figure before issue 36); depth 2 publishes window k+1 while
# window k's acks are on their way. Each connection is driven by its own thread:
# py-amqp serves one connection from one thread.
AMQP_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (1, 1, 2),
    (1, 1, 4),
    (1, 4, 2),
    (2, 1, 2),
    (4, 1, 2),
)


def layout_name(layout: tuple[int, int, int]) -> str:
    conns, channels, depth = layout
    return f"{conns}conn x {channels}ch, depth {depth}"


class _Confirms:
    """One channel's publisher confirms: the highest tag up to which all were acked.

    RabbitMQ may ack one tag at a time or many at once (`multiple`), and does not
    promise the order: a single ack above the watermark waits in `single`."""

    def __init__(self) -> None:
        self.acked = 0
        self.single: set[int] = set()
        self.nacked = 0

    def on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.acked = max(self.acked, tag)
        else:
            self.single.add(tag)

    def on_nack(self, tag: int, multiple: bool) -> None:
        self.nacked = tag

    def upto(self, tag: int) -> bool:
        if self.nacked:
            raise BenchError(f"raw publish: RabbitMQ refused messages (nack {self.nacked})")
        while self.acked < tag and self.acked + 1 in self.single:
            self.acked += 1
            self.single.discard(self.acked)
        return self.acked >= tag


def _amqp_messages(n: int) -> list[Any]:
    """n py-amqp messages as the beat publishes them: Celery's protocol-2 body,
    headers and properties, a fresh task id each."""
    import amqp

    headers, _properties, embed = _task_template()
    body = json.dumps([[0, 1], {}, embed]).encode()
    messages = []
    for _ in range(n):
        task_id = str(uuid.uuid4())
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
    return messages


def _amqp_connection_publish(
    url: str,
    queue: str,
    messages: list[Any],
    channels: int,
    depth: int,
    ready: threading.Barrier,
    errors: list[BaseException],
) -> None:
    """One connection's share: its windows round robin over its channels, each
    channel keeping at most `depth` windows awaiting their confirms."""
    import amqp

    conn = amqp.Connection(**_amqp_params(url))
    try:
        conn.connect()
        chans: list[tuple[Any, _Confirms]] = []
        for _ in range(channels):
            channel: Any = conn.channel()  # py-amqp: confirm_select, events
            channel.confirm_select()
            confirms = _Confirms()
            channel.events["basic_ack"].add(confirms.on_ack)
            channel.events["basic_nack"].add(confirms.on_nack)
            chans.append((channel, confirms))
        ready.wait()
        awaiting: list[deque[int]] = [deque() for _ in chans]  # each window's last tag
        published = [0] * channels

        def confirmed(i: int, tag: int) -> None:
            deadline = time.monotonic() + 30
            while not chans[i][1].upto(tag):
                if time.monotonic() > deadline:
                    raise BenchError("raw publish: confirms did not arrive within 30 s")
                conn.drain_events(timeout=5)

        for w, start in enumerate(range(0, len(messages), WINDOW)):
            i = w % channels
            if len(awaiting[i]) >= depth:
                confirmed(i, awaiting[i].popleft())
            window = messages[start : start + WINDOW]
            publish = chans[i][0].basic_publish
            for message in window:
                publish(message, exchange="", routing_key=queue)
            published[i] += len(window)
            awaiting[i].append(published[i])
        for i in range(channels):
            confirmed(i, published[i])
    except BaseException as exc:
        errors.append(exc)
        ready.abort()
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def amqp_publish_layout_per_s(
    n: int,
    url: str,
    layout: tuple[int, int, int],
    queue: str = "bench.raw",
    arguments: dict[str, Any] | None = None,
) -> float:
    """Confirmed publishes a second of n prebuilt messages with one layout."""
    import amqp

    conns, channels, depth = layout
    messages = _amqp_messages(n)
    admin = amqp.Connection(**_amqp_params(url))
    admin.connect()
    try:
        channel: Any = admin.channel()
        channel.queue_declare(queue, durable=True, auto_delete=False, arguments=arguments)
        channel.queue_purge(queue)
        # Whole windows per connection, so every connection's windows are full.
        windows = [messages[s : s + WINDOW] for s in range(0, n, WINDOW)]
        shares = [[m for w in windows[k::conns] for m in w] for k in range(conns)]
        ready = threading.Barrier(conns + 1)
        errors: list[BaseException] = []
        threads = [
            threading.Thread(
                target=_amqp_connection_publish,
                args=(url, queue, share, channels, depth, ready, errors),
                daemon=True,
            )
            for share in shares
        ]
        for t in threads:
            t.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise BenchError(f"raw publish ({layout_name(layout)}): {errors[0]!r}")
        count = channel.queue_declare(queue, passive=True).message_count
        channel.queue_delete(queue)
    finally:
        with contextlib.suppress(Exception):
            admin.close()
    if count != n:
        raise BenchError(f"raw publish: {count} of {n} confirmed messages in the queue")
    return n / elapsed


def amqp_publish_rates(
    n: int, url: str, layouts: tuple[tuple[int, int, int], ...] = AMQP_LAYOUTS
) -> dict[str, Any]:
    """Confirmed publishes a second of each layout into a plain durable queue
    (`layouts`: name -> rate), the best of them (`best`, `per_s`), and the best
    layout into a priority queue like the beat's (`priority_per_s`)."""
    rates = {layout_name(lay): amqp_publish_layout_per_s(n, url, lay) for lay in layouts}
    best = max(layouts, key=lambda lay: rates[layout_name(lay)])
    priority = amqp_publish_layout_per_s(
        n, url, best, queue="bench.raw.priority", arguments={"x-max-priority": 2}
    )
    return {
        "layouts": rates,
        "best": layout_name(best),
        "per_s": rates[layout_name(best)],
        "priority_per_s": priority,
    }
