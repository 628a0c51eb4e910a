"""Publishing admitted executions to the broker: one Publisher protocol, two transports.

One round trip per message, and Celery's per-call `send_task` overhead, cap a
beat at a few thousand messages a second; a top-of-hour burst needs tens of
thousands (docs/explanation/firing.md, "Publishing prebuilt messages"). So messages
go out in chunks of prebuilt bytes: one
redis-py pipeline of LPUSHes per chunk (RedisPublisher), or py-amqp
basic_publish with publisher-confirm windows on RabbitMQ (AmqpPublisher) — no
kombu Producer per message. A chunk counts as sent only when it went out whole
(and, on RabbitMQ, was acknowledged); the rest is published again next cycle —
a duplicate message is harmless, the worker's claim decides.

Messages are built ahead (issue 19): `prepare(items)` builds and keeps each
one's bytes (envelopes.py: exactly what kombu would send for Celery's protocol-2
task message) while it waits for its due time, keyed by (id, attempt, queue);
`publish(items)` uses the kept bytes, builds any others on the spot, and drops
the bytes of what was sent; `forget(ids)` drops kept bytes of executions that
will not be published (cancelled, re-planned, partition lost). The trace
headers are the publishing span's, spliced in at publish time (envelopes.py).

A broker that goes silent (black-holed, not refusing) must not freeze the beat
(issue 16): on RabbitMQ every call is bounded by `io_timeout_s` — the TCP
connect and the AMQP handshake (connect_timeout), each write and read
(socket read/write timeouts, which also bound the close handshake after a
failure) and each wait for confirms; on Redis by the transport's socket
timeouts (settings.CELERY_BROKER_TRANSPORT_OPTIONS). Leases do not depend on
publishing: the beat's lease keeper renews them on its own thread
(partitions.LeaseKeeper), and `keepalive()`, called between chunks and while a
confirm window is open, is the same keeper's renewal for a beat driven without
that thread (a no-op with it). So a beat that cannot publish does not lose its
partitions to a lease expiry; what it does instead — hand them over to a beat that
can, after BEAT_PUBLISH_STALL_S with work due and nothing published — is
handover.py's rule, fed by the outcome of every `publish` and asking `ping()`
whether the broker answers again.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from django.conf import settings

from config import telemetry
from dispatch.scheduler.envelopes import TASK_NAME, Builder, RedisEnvelope, trace_fragment
from dispatch.scheduler.firing import Pending

log = logging.getLogger("dispatch.beat")

__all__ = ["CHUNK_SIZE", "TASK_NAME", "Publisher", "publisher_for"]

CHUNK_SIZE = 1000

Key = tuple[str, int, str]  # (execution id, attempt, queue): what a kept message is for


class Publisher(Protocol):
    def prepare(self, items: list[Pending]) -> None:
        """Build and keep the message bytes of `items` for a later `publish`."""
        ...

    def forget(self, ids: Iterable[str]) -> None:
        """Drop the kept bytes of these executions (any attempt, any queue)."""
        ...

    def publish(self, items: list[Pending]) -> list[Pending]:
        """Publish `items`; returns those the broker took, in whole chunks (on RabbitMQ
        not necessarily a prefix: windows on several channels settle in any order)."""
        ...

    def ping(self) -> bool:
        """Whether the broker answers one round trip now (bounded as every call is)."""
        ...

    @property
    def kept(self) -> int:
        """How many messages are kept built (for the beat's memory report)."""
        ...


class _ChunkedPublisher(abc.ABC):
    """What both transports share: the kept messages, the span and the failure handling."""

    def __init__(
        self, *, beat: str, io_timeout_s: float = 5.0, keepalive: Callable[[], None] | None = None
    ) -> None:
        self.beat = beat
        self.io_timeout_s = io_timeout_s
        self._keepalive = keepalive or (lambda: None)
        self._builder: Builder | None = None
        self._kept: dict[Key, Any] = {}
        self._declared: set[str] = set()
        self._trace_headers: dict[str, Any] = {}
        # The chunks published and not yet known to be taken (several on RabbitMQ).
        self._in_flight: list[list[Pending]] = []

    # --- the Publisher protocol -------------------------------------------------------

    def prepare(self, items: list[Pending]) -> None:
        # No broker I/O: the bytes only (~1.2 KB a message kept on Redis, ~1.5 KB on
        # RabbitMQ, measured with 100,000 kept). Not thread-safe: the beat's loop only.
        kept = self._kept
        for p in items:
            key = (p.id, p.attempt, p.queue)
            if key not in kept:
                kept[key] = self._build(p)

    def forget(self, ids: Iterable[str]) -> None:
        # One pass over the kept keys (about 5 ms with 100,000 kept): cheaper in memory
        # than an index by id, and forgetting is rare next to building.
        gone = set(ids)
        if gone and self._kept:
            for key in [k for k in self._kept if k[0] in gone]:
                del self._kept[key]

    def publish(self, items: list[Pending]) -> list[Pending]:
        from config.celery_app import app

        sent: list[Pending] = []
        try:
            with telemetry.tracer.start_as_current_span("beat.publish") as span:
                span.set_attribute("scheduler.messages", len(items))
                # Every message of the batch carries this span's context, so each
                # execution's worker and target spans join the firing's trace.
                self._trace_headers = telemetry.inject({})
                self._send(app, items, sent)
        except Exception:
            log.exception(
                "beat %s: publish failed after %d of %d; the rest retry next cycle",
                self.beat,
                len(sent),
                len(items),
            )
            # Part of the failed chunk may be on the broker: its messages are built
            # afresh next time (new task ids, new Redis delivery tags — two messages
            # with one tag would share one entry of kombu's unacked index).
            for chunk in self._in_flight:
                for p in chunk:
                    self._kept.pop((p.id, p.attempt, p.queue), None)
            self._reset()
        self._in_flight = []
        return sent

    @property
    def kept(self) -> int:
        """How many messages are kept built (for the beat's memory report)."""
        return len(self._kept)

    def ping(self) -> bool:
        try:
            self._ping()
        except Exception as exc:
            log.info("beat %s: the broker does not answer yet (%s)", self.beat, exc)
            self._reset()
            return False
        return True

    # --- the transports' parts ----------------------------------------------------------

    def _messages(self, chunk: list[Pending]) -> list[Any]:
        """The chunk's messages, kept or built now; marks the chunk in flight."""
        self._in_flight.append(chunk)
        kept = self._kept
        return [kept.get((p.id, p.attempt, p.queue)) or self._build(p) for p in chunk]

    def _sent(self, chunk: list[Pending], sent: list[Pending]) -> None:
        for p in chunk:
            self._kept.pop((p.id, p.attempt, p.queue), None)
        self._in_flight = [c for c in self._in_flight if c is not chunk]
        sent.extend(chunk)

    def _envelopes(self) -> Builder:
        if self._builder is None:
            from config.celery_app import app

            self._builder = Builder(app)
        return self._builder

    @abc.abstractmethod
    def _build(self, p: Pending) -> Any:
        """The message for `p`, as this transport publishes it."""

    @abc.abstractmethod
    def _send(self, app: Any, items: list[Pending], sent: list[Pending]) -> None:
        """Publish chunk by chunk, extending `sent` with each chunk the broker took
        (each broker's own way: a Redis pipeline, or AMQP confirm windows)."""

    @abc.abstractmethod
    def _ping(self) -> None:
        """One round trip to the broker; raises when it does not answer."""

    def _reset(self) -> None:  # noqa: B027 - a hook: only AMQP holds connection state
        """After a failure: forget connection state that may be broken."""


class RedisPublisher(_ChunkedPublisher):
    """Redis: each chunk goes out as one non-transactional pipeline (as kombu's own
    publish batch), one multi-value LPUSH per list key of the chunk."""

    def _build(self, p: Pending) -> RedisEnvelope:
        return self._envelopes().redis(p.id, p.attempt, p.queue)

    def _send(self, app: Any, items: list[Pending], sent: list[Pending]) -> None:
        fragment = trace_fragment(self._trace_headers)
        with app.producer_or_acquire() as producer:
            channel = producer.channel
            # kombu's redis-py client: its connection pool, socket timeouts and
            # global key prefix are the ones kombu's own publish would use.
            client = channel.client
            keys: dict[str, str] = {}
            for start in range(0, len(items), CHUNK_SIZE):
                chunk = items[start : start + CHUNK_SIZE]
                self._keepalive()  # a burst of many chunks does not outlast the lease
                by_key: dict[str, list[bytes]] = {}
                for env in self._messages(chunk):
                    key = keys.get(env.queue)
                    if key is None:
                        key = keys[env.queue] = self._declare(app, producer, env.queue)
                    by_key.setdefault(key, []).append(env.with_trace(fragment))
                # LPUSH k m1 m2 … pushes m1 first, as one LPUSH each would: a worker's
                # BRPOP takes them in the chunk's order. On an error nothing of the
                # chunk counts as sent and its rows are published again later (a
                # duplicate message is harmless: the worker's claim decides).
                with client.pipeline(transaction=False) as pipe:
                    for key, messages in by_key.items():
                        pipe.lpush(key, *messages)
                    pipe.execute()
                self._sent(chunk, sent)

    def _ping(self) -> None:
        from config.celery_app import app

        # The connection publishing uses, so an answer means the next pipeline can go out.
        with app.producer_or_acquire() as producer:
            producer.channel.client.ping()

    def _declare(self, app: Any, producer: Any, name: str) -> str:
        """The list key kombu's _put uses for queue `name` (priority 0: the Redis
        publisher sets none; priority levels are queues here), the queue declared
        once as kombu's publish would (its exchange binding). kombu's _put also sets a
        PEXPIRE for queues declared with x-expires: the platform's queues have none."""
        if name not in self._declared:
            producer.maybe_declare(app.amqp.queues[name], retry=False)
            self._declared.add(name)
        key: str = producer.channel._q_for_pri(name, 0)
        return key


# How long the broker may take to confirm a window once it is published.
CONFIRM_TIMEOUT_S = 30.0

_PENDING, _ACKED, _NACKED = 0, 1, 2
_PENDING_BYTE = bytes([_PENDING])


class _Confirms:
    """One channel's publisher confirms: each delivery tag pending, acked or nacked.

    RabbitMQ confirms a tag alone or every pending tag up to it (`multiple`), and does
    not promise to confirm in publishing order, so a window is judged by the state of
    each of its tags, not by the highest tag acked. One byte a tag, indexed from
    `base` (the first tag of the current publish: every earlier one was settled);
    below `floor` (an index) every tag is settled."""

    def __init__(self) -> None:
        self.base = 1
        self.floor = 0
        self.state = bytearray()

    def published(self, count: int) -> tuple[int, int]:
        """`count` more tags pending: their first and last tag."""
        first = self.base + len(self.state)
        self.state.extend(bytes(count))
        return first, first + count - 1

    def on_ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, _ACKED)

    def on_nack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, _NACKED)

    def _settle(self, tag: int, multiple: bool, verdict: int) -> None:
        i = tag - self.base
        if i < 0 or i >= len(self.state):
            return  # not a tag of this publish (none can be: a failure drops the channel)
        state = self.state
        if multiple:
            # Every tag up to this one not settled yet gets the verdict.
            lo = self.floor
            state[lo : i + 1] = state[lo : i + 1].replace(_PENDING_BYTE, bytes([verdict]))
            self.floor = max(lo, i + 1)
        else:
            state[i] = verdict
            while self.floor < len(state) and state[self.floor] != _PENDING:
                self.floor += 1

    def nacked(self, first: int, last: int) -> int | None:
        """None while a tag of first..last is pending, else how many were nacked."""
        tags = self.state[first - self.base : last - self.base + 1]
        if _PENDING in tags:
            return None
        return tags.count(_NACKED)

    def restart(self) -> None:
        """Every tag settled: the next publish's tags start after them."""
        self.base += len(self.state)
        self.floor = 0
        self.state = bytearray()


class _Window:
    """A chunk published on one channel, awaiting the broker's confirms of its tags."""

    __slots__ = ("chunk", "confirms", "deadline", "first", "last")

    def __init__(self, chunk: list[Pending], confirms: _Confirms, count: int) -> None:
        self.chunk = chunk
        self.confirms = confirms
        self.first, self.last = confirms.published(count)
        self.deadline = time.monotonic() + CONFIRM_TIMEOUT_S


class AmqpPublisher(_ChunkedPublisher):
    """RabbitMQ: publisher confirms in windows, pipelined over several channels.

    Waiting for each message's confirm caps a beat near a thousand messages
    a second; not confirming at all lost messages in bursts (measured here:
    96-195 of 200k in 4 of 6 runs). A window keeps the guarantee: a chunk
    counts as sent only once the broker acknowledged every message of it.

    Awaiting each window's acks before publishing the next left the broker idle
    while the client waited and the client idle while the broker wrote (issue 36):
    up to `windows` chunks are now out awaiting confirms at once, round robin over
    `channels` channels of one connection (each channel's confirms are its own
    delivery tags; the broker serves channels in parallel). One connection, driven
    by the beat's own thread: more connections in threads measured no faster here
    (bench limits), py-amqp's per-message work holds the GIL. Messages of two
    windows may reach the queue interleaved; the platform makes no ordering promise
    between executions (the worker's claim decides what runs).
    """

    def __init__(
        self,
        *,
        beat: str,
        io_timeout_s: float = 5.0,
        keepalive: Callable[[], None] | None = None,
        channels: int | None = None,
        windows: int | None = None,
    ) -> None:
        super().__init__(beat=beat, io_timeout_s=io_timeout_s, keepalive=keepalive)
        self.channels = max(1, channels or settings.BEAT_AMQP_CHANNELS)
        self.windows = max(1, windows or settings.BEAT_AMQP_WINDOWS)
        self._amqp: tuple[Any, list[tuple[Any, _Confirms]]] | None = None

    def _build(self, p: Pending) -> tuple[str, Any, dict[str, Any]]:
        """(queue, py-amqp message, its headers without trace context): the body and
        properties kombu's py-amqp transport would hand to basic_publish."""
        import amqp

        from config.celery_app import amqp_queue

        builder = self._envelopes()
        # The duration class's priority queue, the level as message priority.
        queue, level = amqp_queue(p.queue)
        headers = builder.amqp_headers(p.id, p.attempt)
        msg = amqp.Message(
            builder.body(p.id, p.attempt).encode(),
            priority=level or 0,
            content_type="application/json",
            content_encoding="utf-8",
            application_headers=headers,
            correlation_id=headers["id"],
            reply_to=builder.reply_to,
            delivery_mode=2,
        )
        return queue.name, msg, headers

    def _connect(self) -> tuple[Any, list[tuple[Any, _Confirms]]]:
        from kombu import Connection

        io = self.io_timeout_s
        # connect_timeout bounds the TCP connect and the AMQP handshake; the socket
        # timeouts bound every later write and read, the close handshake included.
        conn = Connection(
            settings.CELERY_BROKER_URL,
            connect_timeout=io,
            transport_options={"read_timeout": io, "write_timeout": io},
        )
        channels: list[tuple[Any, _Confirms]] = []
        for i in range(self.channels):
            # py-amqp channels: confirm_select, events
            channel: Any = conn.default_channel if i == 0 else conn.channel()
            channel.confirm_select()
            confirms = _Confirms()
            channel.events["basic_ack"].add(confirms.on_ack)
            channel.events["basic_nack"].add(confirms.on_nack)
            channels.append((channel, confirms))
        self._declared.clear()
        return conn, channels

    def _send(self, app: Any, items: list[Pending], sent: list[Pending]) -> None:
        from config.celery_app import amqp_queue

        if self._amqp is None:
            self._amqp = self._connect()
        conn, channels = self._amqp
        trace = self._trace_headers
        awaiting: list[_Window] = []
        refused = 0
        for n, start in enumerate(range(0, len(items), CHUNK_SIZE)):
            # At most `windows` chunks out unconfirmed: wait for the oldest to settle.
            while len(awaiting) >= self.windows and not refused:
                refused += self._settle(conn, awaiting, sent, wait=True)
            if refused:
                break  # the broker refuses messages: nothing more goes out this round
            self._keepalive()  # a burst of many chunks does not outlast the lease
            chunk = items[start : start + CHUNK_SIZE]
            channel, confirms = channels[n % len(channels)]
            # py-amqp's own publish, not the confirm-per-message basic_publish_confirm
            # kombu would switch to: the confirms are awaited per window.
            basic_publish = channel._basic_publish
            # The window's tags are counted before its first message goes out: py-amqp
            # reads confirms that have arrived while it publishes (basic_publish polls
            # the connection for connection.blocked), so an ack may come mid-chunk.
            awaiting.append(_Window(chunk, confirms, len(chunk)))
            for p, (queue, msg, headers) in zip(chunk, self._messages(chunk), strict=True):
                if queue not in self._declared:
                    amqp_queue(p.queue)[0](channels[0][0]).declare()
                    self._declared.add(queue)
                msg.properties["application_headers"] = headers | trace if trace else headers
                # The default (anonymous) exchange routes by queue name.
                basic_publish(msg, exchange="", routing_key=queue)
            refused += self._settle(conn, awaiting, sent, wait=False)
        # The rest of the windows out, even after a refusal: what the broker acked counts.
        while awaiting:
            refused += self._settle(conn, awaiting, sent, wait=True)
        for _, confirms in channels:
            confirms.restart()
        if refused:
            raise RuntimeError(f"broker refused {refused} messages (basic.nack)")

    def _settle(self, conn: Any, awaiting: list[_Window], sent: list[Pending], wait: bool) -> int:
        """Windows the broker has settled leave `awaiting`, an acked one counted as
        sent; with `wait`, confirms are read until the oldest window has settled.
        Returns how many messages of the settled windows the broker refused."""
        oldest = awaiting[0] if wait and awaiting else None
        refused = 0
        while True:
            left = []
            for window in awaiting:
                nacked = window.confirms.nacked(window.first, window.last)
                if nacked is None:
                    left.append(window)
                elif nacked:
                    # Not sent: the beat publishes its items again later.
                    refused += nacked
                else:
                    self._sent(window.chunk, sent)
            awaiting[:] = left
            if oldest is None or all(w is not oldest for w in awaiting):
                return refused
            if time.monotonic() > oldest.deadline:
                raise TimeoutError(
                    f"publisher confirms did not arrive within {CONFIRM_TIMEOUT_S:.0f} s"
                )
            # The lease keeper's renewal, when due and not on its own thread
            # (never inside a transaction: publishing follows the admission's commit).
            self._keepalive()
            conn.drain_events(timeout=self.io_timeout_s)

    def _ping(self) -> None:
        # A fresh connection: TCP, the AMQP handshake and confirm mode, each bounded by
        # io_timeout_s, are the round trips the next publish would need first.
        self._reset()
        self._amqp = self._connect()

    def _reset(self) -> None:
        if self._amqp is not None:
            with contextlib.suppress(Exception):
                self._amqp[0].release()
        self._amqp = None


def publisher_for(
    broker_url: str,
    *,
    beat: str,
    io_timeout_s: float = 5.0,
    keepalive: Callable[[], None] | None = None,
) -> Publisher:
    from config.celery_app import is_amqp

    kind = AmqpPublisher if is_amqp(broker_url) else RedisPublisher
    return kind(beat=beat, io_timeout_s=io_timeout_s, keepalive=keepalive)
