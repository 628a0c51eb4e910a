"""Helpers for the worker tests: schedules with loopback targets, execution rows,
publishing as the beat would, and a small stand-in for the beat's retry loop."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from kombu import Connection, Queue

from config.celery_app import amqp_queue, is_amqp
from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler import sweeper
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, processes, wait_for, worker_cmd
from tests.support.rows import execution_row

QUEUES = ("high.short", "default.short", "low.short", "high.long", "default.long", "low.long")
# Retry policies: one attempt only, and three attempts with no wait between them.
ONE_SHOT = {"max_attempts": 1, "backoff": "fixed", "initial_s": 0, "max_s": 0}
QUICK_RETRY = {"max_attempts": 3, "backoff": "fixed", "initial_s": 0, "max_s": 0}
_seq = itertools.count(1)


def db_now() -> datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        value: datetime = cur.fetchone()[0]
    return value


def purge(broker: str) -> None:
    """Empty the platform's queues (and, on Redis, forget unacked leftovers of killed workers)."""
    with Connection(broker) as conn:
        channel = conn.default_channel
        for name in QUEUES:
            Queue(name, durable=True, auto_delete=False)(channel).declare()
            channel.queue_purge(name)
        if is_amqp(broker):
            # Where beats publish on RabbitMQ: one priority queue per duration class.
            for name in ("default.short", "default.long"):
                queue = amqp_queue(name)[0]
                queue(channel).declare()
                channel.queue_purge(queue.name)
        if broker.startswith("redis"):
            client = channel.client
            client.delete("unacked", "unacked_index", "unacked_mutex")


def make_schedule(
    principal: Principal,
    target: dict[str, Any],
    *,
    retry: dict[str, Any] | None = None,
    timeout_s: int = 10,
    name: str | None = None,
    **fields: Any,
) -> Schedule:
    """A schedule whose target is stored as given (other definition `fields`, such as
    `cron` and `timezone`, as a client would send them).

    Loopback receivers cannot pass the save-time SSRF check (by design), so the
    schedule is saved with a placeholder and the target written afterwards —
    the same path as a DNS name that changes after it was saved.
    """
    schedule = services.schedule_create(
        actor=principal,
        data={
            "name": name or f"w-{next(_seq)}-{uuid.uuid4().hex[:6]}",
            "cron": "0 0 1 1 *",
            "target": {"type": "http", "url": "https://billing.internal/hook"},
            "retry": retry or {"max_attempts": 3, "backoff": "fixed", "initial_s": 1, "max_s": 1},
        }
        | fields,
    )
    Schedule.objects.filter(pk=schedule.pk).update(
        target=target | {"timeout_s": timeout_s}, timeout_s=timeout_s
    )
    schedule.refresh_from_db()
    return schedule


def make_execution(schedule: Schedule, *, due_in_s: float = -0.5) -> Execution:
    now = db_now()
    scheduled_for = now + timedelta(seconds=due_in_s, microseconds=next(_seq))
    return execution_row(schedule, scheduled_for)


def publish(
    execution_id: Any, attempt: int = 1, *, queue: str = "default.short", broker: str | None = None
) -> None:
    """What the beat does at due time: one `dispatch.run_execution` message."""
    from config.celery_app import app

    if broker is None or broker == settings.CELERY_BROKER_URL:
        app.send_task("dispatch.run_execution", args=[str(execution_id), attempt], queue=queue)
        return
    with app.connection_for_write(broker) as conn:
        app.send_task(
            "dispatch.run_execution",
            args=[str(execution_id), attempt],
            queue=queue,
            connection=conn,
        )


class Pump:
    """The beat's part of retries, for tests without a beat: sweep expired leases and
    publish `retry_scheduled` rows once their next_attempt_at is due (DB clock)."""

    def __init__(self, *, queue: str = "default.short", broker: str | None = None) -> None:
        self.queue = queue
        self.broker = broker
        self.published: list[tuple[str, int]] = []
        self._seen: set[tuple[str, int, Any]] = set()

    def __call__(self) -> None:
        sweeper.sweep_expired_leases(partitions=None)
        due = Execution.objects.raw(
            "SELECT id, attempt, next_attempt_at FROM dispatch_execution "
            "WHERE state = 'retry_scheduled' AND next_attempt_at <= now()"
        )
        for row in due:
            key = (str(row.id), row.attempt, row.next_attempt_at)
            if key in self._seen:
                continue
            self._seen.add(key)
            publish(row.id, row.attempt, queue=self.queue, broker=self.broker)
            self.published.append((str(row.id), row.attempt))

    def until(self, predicate: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self()
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def run_to_end(
    principal: Principal,
    target: dict[str, Any],
    *,
    retry: dict[str, Any] = ONE_SHOT,
    timeout_s: int = 10,
    queue: str = "default.short",
    wait: float = 20,
) -> Execution:
    """One execution of a new schedule calling `target`: published as the beat would,
    then pumped (expired leases, due retries) until it ends; returned fresh from the DB."""
    execution = make_execution(make_schedule(principal, target, retry=retry, timeout_s=timeout_s))
    publish(execution.id, 1, queue=queue)
    Pump(queue=queue).until(final(execution), timeout=wait)
    execution.refresh_from_db()
    return execution


def kinds(execution: Execution | str) -> list[str]:
    pk = execution.pk if isinstance(execution, Execution) else execution
    return list(
        ExecutionEvent.objects.filter(execution_id=pk).order_by("id").values_list("kind", flat=True)
    )


def state_of(execution: Execution | str) -> str:
    pk = execution.pk if isinstance(execution, Execution) else execution
    return str(Execution.objects.values_list("state", flat=True).get(pk=pk))


def final(execution: Execution) -> Callable[[], bool]:
    return lambda: state_of(execution) in {"succeeded", "dead", "cancelled"}


def worker_log_ready(proc: Proc) -> bool:
    return " ready." in proc.output()


@contextlib.contextmanager
def worker_processes(log_dir: Path) -> Iterator[Callable[..., Proc]]:
    """Start Celery workers (`start(name, queues=..., **env)`), waiting until each is ready."""
    with processes(log_dir) as start:

        def start_worker(
            name: str, *, queues: str = "default.short", concurrency: int = 2, **env: str
        ) -> Proc:
            proc = start(
                name,
                worker_cmd(queues=queues, concurrency=concurrency, name=name),
                **({"EXECUTION_LEASE_S": "3"} | env),
            )
            deadline = time.monotonic() + 30
            while not worker_log_ready(proc):
                if not proc.alive() or time.monotonic() > deadline:
                    raise AssertionError(f"worker {name} did not start:\n{proc.output()}")
                time.sleep(0.1)
            return proc

        yield start_worker


@contextlib.contextmanager
def beat_and_worker(
    log_dir: Path, ledger: Ledger, *, beat_name: str, worker_name: str
) -> Iterator[dict[str, Proc]]:
    """A real beat and a real Celery worker (every queue) on the test database, the
    worker allowed to call `ledger`; the queues emptied before and after."""
    purge(settings.CELERY_BROKER_URL)
    with processes(log_dir) as start:
        beat = start("beat", beat_cmd("--name", beat_name, "--cycle", "0.2", "--lease-ttl", "5"))
        worker = start(
            "worker",
            worker_cmd(queues=",".join(QUEUES), concurrency=2, name=worker_name),
            TARGET_TEST_ALLOW=ledger.allow_entry,
        )
        try:
            wait_for(
                lambda: " ready." in worker.output() or not worker.alive(),
                timeout=60,
                what="worker ready",
            )
            assert worker.alive(), worker.output()
            yield {"beat": beat, "worker": worker}
        finally:
            purge(settings.CELERY_BROKER_URL)


def pool_children(proc: Proc) -> list[int]:
    """Pids of a Celery worker's pool processes (the children of its main process)."""
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Gate:
    """A switch a test flips from its own thread (e.g. "the target was called")."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)


def hold_first_call(ledger: Ledger, seconds: float) -> Gate:
    """Makes `ledger` answer 200 "ok", holding its reply to the first call `seconds`;
    the returned gate opens when that first call arrives."""
    called = Gate()

    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if len(ledger.requests) == 1:
            called.set()
            time.sleep(seconds)
        return 200, {}, b"ok"

    ledger.respond = respond
    return called


def run_queue_target(principal: Principal, target: dict[str, Any]) -> tuple[Execution, Any]:
    """One execution of a queue target on the platform's (Redis) broker, run to its
    end, and the message the tenant's queue received (acknowledged)."""
    name = target["routing_key"]
    with Connection(settings.CELERY_BROKER_URL) as conn:
        conn.default_channel.client.delete(name)
        execution = run_to_end(principal, target)
        assert execution.state == "succeeded", execution.error
        queue = conn.SimpleQueue(name)
        message = queue.get(timeout=5)
        message.ack()
        queue.close()
    return execution, message
