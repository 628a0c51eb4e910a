"""The beat's broker messages as bytes, built before their due time (issue 19).

At a top-of-hour burst the beat's time goes to pushing messages, so the
work of making one — kombu's Producer.publish, the JSON and base64 of its
Redis envelope, Celery's header dict — is done ahead: `prepare` builds each
message here while it waits for its due time, and `publish` only pushes the
kept bytes (RedisPublisher: LPUSH in redis-py pipelines; AmqpPublisher: py-amqp
basic_publish of a kept message).

What is built is exactly what kombu would have sent for Celery's protocol-2
`dispatch.run_execution` task message (the headers come from Celery's own
`as_task_v2`, so a Celery upgrade that changes them changes ours): on Redis the
JSON envelope kombu's virtual transport LPUSHes (body base64-encoded, per-message
delivery tag), on RabbitMQ the body and the properties kombu's py-amqp transport
hands to basic_publish. tests/integration/scheduler/test_publish_raw.py compares
both with kombu's own output and runs one through a real Celery worker.

Trace context: a message carries the context of the `beat.publish` span that
published it (the worker's and target's spans are children of the publish, not of
some staging step minutes earlier), so trace headers are the one part not built
ahead: a Redis envelope keeps the offset where its headers object ends and the
publish splices the span's headers in there (one small bytes join per message);
an AMQP message gets them merged into its application headers.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

TASK_NAME = "dispatch.run_execution"

# Placeholders in the envelope template: NUL-delimited strings that neither Celery's
# headers nor a queue name contain; json.dumps spells them as \u0000… escapes.
_SLOTS = ("body", "id", "args", "queue", "tag", "cut")


def _slot(name: str) -> str:
    return f"\x00envelope:{name}\x00"


def _dumps(value: Any) -> str:
    # kombu.utils.json.dumps is json.dumps with kombu's encoder (for types these
    # messages do not hold): the same spelling, separators included.
    return json.dumps(value)


def _uuid4_pair() -> tuple[str, str]:
    """Two random (version 4) UUIDs as str(uuid.uuid4()) spells them, from one urandom
    call: uuid.uuid4() was a third of the cost of building a message."""
    b = bytearray(os.urandom(32))
    b[6], b[8] = b[6] & 0x0F | 0x40, b[8] & 0x3F | 0x80
    b[22], b[24] = b[22] & 0x0F | 0x40, b[24] & 0x3F | 0x80
    h = b.hex()
    return (
        f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        f"{h[32:40]}-{h[40:44]}-{h[44:48]}-{h[48:52]}-{h[52:64]}",
    )


@dataclass(frozen=True, slots=True)
class RedisEnvelope:
    """One message as kombu's Redis transport would LPUSH it: `data`, with the
    publishing span's trace headers to be spliced in at `cut` (end of the headers)."""

    queue: str
    data: bytes
    cut: int

    def with_trace(self, fragment: bytes) -> bytes:
        if not fragment:
            return self.data
        return b"".join((self.data[: self.cut], fragment, self.data[self.cut :]))


class Builder:
    """Builds messages for one Celery app from its protocol-2 template (made once)."""

    def __init__(self, app: Any) -> None:
        msg = app.amqp.as_task_v2(
            str(uuid.uuid4()), TASK_NAME, args=["", 0], kwargs={}, ignore_result=True
        )
        self.headers: dict[str, Any] = dict(msg.headers)
        self.reply_to: str = dict(msg.properties).get("reply_to") or ""
        self.embed: Any = msg.body[2]
        self._head, self._tail = self._redis_template()
        # The body's constant end, serialised once: `, {}, {"callbacks": null, …}]`.
        self._body_tail = _dumps([{}, self.embed])[1:]

    def _redis_template(self) -> tuple[str, str]:
        """kombu's Redis envelope as two %-format strings (`%(id)s`…): the text before
        the end of its headers object (where trace headers go) and the rest."""
        s = {name: _slot(name) for name in _SLOTS}
        headers = self.headers | {"id": s["id"], "root_id": s["id"], "argsrepr": s["args"]}
        headers[s["cut"]] = 0  # last key: where the trace headers go (appended, as dict | does)
        # The structure kombu's virtual channel makes: prepare_message, then
        # _inplace_augment_message (base64 body, delivery tag, delivery_info).
        envelope = {
            "body": s["body"],
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "correlation_id": s["id"],
                "reply_to": self.reply_to,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": s["queue"]},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": s["tag"],
            },
        }
        text = _dumps(envelope).replace("%", "%%")
        for name, value in s.items():
            if name != "cut":
                text = text.replace(_dumps(value), f"%({name})s")
        head, cut, tail = text.partition(", " + _dumps(s["cut"]) + ": 0")
        if not cut or "\\u0000" in head + tail:
            raise RuntimeError("Celery's task message template has changed: a placeholder was left")
        return head, tail

    def body(self, execution_id: str, attempt: int) -> str:
        """json.dumps([[execution_id, attempt], {}, embed]), the constant part made once."""
        return f"[[{_dumps(execution_id)}, {int(attempt)}], {self._body_tail}"

    def redis(self, execution_id: str, attempt: int, queue: str) -> RedisEnvelope:
        body = self.body(execution_id, attempt).encode()
        task_id, tag = _uuid4_pair()
        # Base64 and UUIDs need no JSON escaping: quoted as they are.
        values = {
            "body": f'"{base64.b64encode(body).decode()}"',
            "id": f'"{task_id}"',
            "args": _dumps(repr([execution_id, attempt])),
            "queue": _dumps(queue),
            "tag": f'"{tag}"',
        }
        # JSON is ASCII here (json.dumps escapes the rest): characters are bytes.
        head = (self._head % values).encode()
        return RedisEnvelope(queue, head + (self._tail % values).encode(), len(head))

    def amqp_headers(self, execution_id: str, attempt: int) -> dict[str, Any]:
        task_id = _uuid4_pair()[0]
        return self.headers | {
            "id": task_id,
            "root_id": task_id,
            "argsrepr": repr([execution_id, attempt]),
        }


def trace_fragment(trace_headers: dict[str, Any]) -> bytes:
    """The trace headers as the tail of a JSON object's members (`, "k": "v"`…)."""
    return "".join(f", {_dumps(k)}: {_dumps(v)}" for k, v in trace_headers.items()).encode()
