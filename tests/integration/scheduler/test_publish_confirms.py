"""The RabbitMQ publisher's confirm windows (issue 36): several windows await their
confirms at once, on several channels, and a message counts as sent only once the
broker acknowledged every message of its window — not when it was written, not when
a later tag or another channel's tags were acked.

Real RabbitMQ (RABBITMQ_URL; skipped when unset): refusals are the broker's own
(a queue bounded with `x-overflow: reject-publish` nacks what does not fit), and
the lost link is a real TCP proxy that stops forwarding mid-burst."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from kombu import Connection

from dispatch.scheduler.firing import Pending
from dispatch.scheduler.publish import CHUNK_SIZE, AmqpPublisher
from tests.support.faultproxy import FaultProxy

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "")


@pytest.fixture
def queue(settings: Any) -> Iterator[str]:
    """A plain durable queue of the test's own (not a priority level), deleted after."""
    if not RABBITMQ_URL:
        pytest.skip("RABBITMQ_URL not set")
    settings.CELERY_BROKER_URL = RABBITMQ_URL
    name = f"scratch.confirms.{uuid.uuid4().hex[:8]}"
    yield name
    with Connection(RABBITMQ_URL) as conn:
        channel: Any = conn.default_channel  # py-amqp's: queue_delete
        channel.queue_delete(name)


def items(queue: str, n: int) -> list[Pending]:
    return [Pending(0, str(uuid.uuid4()), 1, queue, 1, 0) for _ in range(n)]


def ids(published: list[Pending]) -> set[str]:
    return {p.id for p in published}


def taken(queue: str) -> list[str]:
    """The execution ids of every message the queue holds (consumed)."""
    got = []
    with Connection(RABBITMQ_URL) as conn:
        channel: Any = conn.default_channel  # py-amqp's: basic_get
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            got.append(json.loads(message.body)[0][0])
    return got


def redeclare(queue: str, **arguments: Any) -> None:
    with Connection(RABBITMQ_URL) as conn:
        channel: Any = conn.default_channel  # py-amqp's: queue_delete, queue_declare
        channel.queue_delete(queue)
        if arguments:
            channel.queue_declare(queue, durable=True, auto_delete=False, arguments=arguments)


def test_messages_the_broker_refused_are_not_sent(queue: str) -> None:
    room = 3 * CHUNK_SIZE + CHUNK_SIZE // 2
    publisher = AmqpPublisher(beat="confirms-test", io_timeout_s=2, channels=3, windows=6)
    try:
        first = items(queue, 1)
        # Connected, and the queue declared (plain) once on this connection.
        assert publisher.publish(first) == first
        # The same queue again, now bounded: RabbitMQ nacks every message that finds it
        # full. The publisher does not declare it again on the same connection.
        redeclare(queue, **{"x-max-length": room, "x-overflow": "reject-publish"})
        burst = items(queue, 6 * CHUNK_SIZE)  # six windows out at once, on three channels
        sent = publisher.publish(burst)
        in_queue = taken(queue)
        assert len(in_queue) == room  # the broker took this many and refused the rest
        # Nothing the broker refused counts as sent, and only whole windows do: the
        # window the queue filled up in was part taken, part refused.
        assert ids(sent) <= set(in_queue)
        assert len(sent) % CHUNK_SIZE == 0 and len(sent) <= 3 * CHUNK_SIZE
        # What was not sent goes out on a later try (the beat's next cycle) once the
        # queue takes it: a new connection, the queue declared plain again.
        redeclare(queue)
        rest = [p for p in burst if p.id not in ids(sent)]
        assert ids(publisher.publish(rest)) == ids(rest)
        assert sorted(taken(queue)) == sorted(ids(rest))
    finally:
        publisher._reset()


def test_a_window_refused_in_its_middle_is_not_sent(queue: str) -> None:
    """One message in the middle of a window goes to a queue that refuses everything,
    the rest of the window (its last message included) to one that takes all: the
    window is judged by every tag it holds, not by its last one acked."""
    full = f"{queue}.full"
    publisher = AmqpPublisher(beat="confirms-test", io_timeout_s=2, channels=3, windows=6)
    try:
        first = items(queue, 1) + items(full, 1)
        assert ids(publisher.publish(first)) == ids(first)  # both declared on this connection
        redeclare(full, **{"x-max-length": 0, "x-overflow": "reject-publish"})
        taken(queue)
        burst = items(queue, 3 * CHUNK_SIZE)
        middle = CHUNK_SIZE + CHUNK_SIZE // 2
        burst[middle] = items(full, 1)[0]
        sent = publisher.publish(burst)
        in_queue = set(taken(queue))
        assert len(in_queue) == len(burst) - 1  # all but the one the full queue refused
        assert burst[middle].id not in ids(sent)
        # The first window was acked whole; the second held the refusal.
        assert ids(burst[:CHUNK_SIZE]) <= ids(sent) <= in_queue
        assert not ids(sent) & ids(burst[CHUNK_SIZE : 2 * CHUNK_SIZE])
    finally:
        publisher._reset()
        redeclare(full)


def test_windows_unconfirmed_when_the_link_goes_silent_are_not_sent(
    queue: str, settings: Any
) -> None:
    url = urlsplit(RABBITMQ_URL)
    assert url.hostname and url.port
    creds = url.netloc.rpartition("@")[0]
    with FaultProxy((url.hostname, url.port)) as proxy:
        settings.CELERY_BROKER_URL = urlunsplit(url._replace(netloc=f"{creds}@{proxy.address}"))
        calls = 0

        def keepalive() -> None:
            # Called before each window and while confirms are awaited: from the
            # third call on, nothing more reaches the broker and no confirm comes back.
            nonlocal calls
            calls += 1
            if calls == 3:
                proxy.blackhole()

        publisher = AmqpPublisher(
            beat="confirms-test", io_timeout_s=1, keepalive=keepalive, channels=2, windows=4
        )
        burst = items(queue, 8 * CHUNK_SIZE)
        sent = publisher.publish(burst)
        # The link dies with what it held: bytes written after the black hole never arrive.
        proxy.reset()
    assert calls >= 3 and len(sent) < len(burst)
    in_queue = set(taken(queue))
    # Windows published but not confirmed are not sent (some of them may have reached
    # the queue: a duplicate later is harmless, a message counted and missing is not).
    assert ids(sent) <= in_queue
    assert len(in_queue) < len(burst)  # the black hole did hold messages back
