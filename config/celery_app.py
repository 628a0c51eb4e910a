"""The Celery application. Workers: `celery -A config worker -Q high.short,default.short,low.short`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
)
from kombu import Queue
from kombu.utils.scheduling import priority_cycle

from config import embedded
from dispatch.queues import PRIORITIES, amqp_queue_name, split_queue_name

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.acquire()

app = Celery("scheduler")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Only the platform's tasks: the benchmarks' no-op task (bench/tasks.py) is imported
# by the bench's own workers alone (`--include bench.tasks`, bench/consume.py).
app.autodiscover_tasks(["dispatch"])


# Celery's Django fixup closes every database connection before and after each
# task unless told to reuse them: a fresh backend per execution (~4.5 ms to
# connect, cold caches) was most of a worker's time. Reuse is bounded instead by
# Django's own rules, applied around each task: CONN_MAX_AGE, and a health check
# so a connection broken by a database restart is replaced, not reused — Django's
# for the ORM's cursors, and core.db's socket check for the named statements
# (a worker's claim), so that after a fail-over the claim goes to the new primary.
app.conf["CELERY_DB_REUSE_MAX"] = 1_000_000


@task_prerun.connect
@task_postrun.connect
def _recycle_db_connections(**_: object) -> None:
    from django.db import close_old_connections

    from core.db import replace_if_ended_by_server

    close_old_connections()
    replace_if_ended_by_server()


@worker_process_init.connect
def _telemetry_after_fork(**_: object) -> None:
    # Exporter threads and sockets do not survive fork: set up in each pool process.
    from config import telemetry

    telemetry.setup("worker")


def pool_name(worker: Any) -> str:
    """`prefork`, `threads`, `solo`…: the pool a worker was started with (`--pool`)."""
    pool = getattr(worker, "pool_cls", "prefork")
    name = pool if isinstance(pool, str) else f"{pool.__module__}.{pool.__qualname__}"
    for known in ("prefork", "threads", "solo", "eventlet", "gevent"):
        if known in name.lower():
            return known
    return name


@worker_init.connect
def _telemetry_without_fork(sender: Any = None, **_: object) -> None:
    # A pool that does not fork (threads, solo) sends no worker_process_init: its
    # tasks run in this process, so set up here. (Never for prefork: the children
    # would inherit a provider whose exporter thread did not survive the fork.)
    if sender is not None and pool_name(sender) != "prefork":
        from config import telemetry

        telemetry.setup("worker")


# --- the threads pool and database connections --------------------------------------------
# With `--pool threads --concurrency N` every pool thread keeps its own Django
# connection (connections are per thread) for CONN_MAX_AGE, reused task after task
# (see _recycle_db_connections): N connections per worker process, plus one per
# call that outlives a third of the lease while its heartbeat thread renews it
# (opened and closed by that thread). PostgreSQL refuses connections past
# max_connections, and a refused claim is a delivery dropped until the beat
# re-publishes it: a worker that could exceed what is left says so at start.
CONNECTIONS_PER_THREAD_AT_WORST = 2  # the pool thread's, and its call's heartbeat


@celeryd_after_setup.connect
def _warn_on_connection_budget(sender: Any, instance: Any, conf: Any, **_: Any) -> None:
    if pool_name(instance) != "threads":
        return
    import logging

    from django.db import connection

    from dispatch.sql import sql

    want = int(instance.concurrency or 1) * CONNECTIONS_PER_THREAD_AT_WORST
    try:
        free = int(sql.scalar("connections_free"))
    except Exception as exc:  # never block a worker's start on this check
        logging.getLogger("dispatch.worker").warning("connection budget not checked: %s", exc)
        return
    finally:
        connection.close()
    if want > free:
        logging.getLogger("dispatch.worker").warning(
            "threads pool: concurrency %s may open up to %s database connections, but PostgreSQL "
            "has %s free (max_connections); lower --concurrency or raise max_connections",
            instance.concurrency,
            want,
            free,
        )


# --- priorities between queues ----------------------------------------------------------
# A worker consuming high.short,default.short,low.short must drain high before
# default before low. Celery's default is to round-robin its queues (H L H L…).
# RabbitMQ: message priorities in one priority queue per duration class (higher first).
AMQP_PRIORITY = {p: len(PRIORITIES) - 1 - i for i, p in enumerate(PRIORITIES)}


def _rank(name: str) -> int:
    prefix = split_queue_name(name)[0]
    return PRIORITIES.index(prefix) if prefix in PRIORITIES else len(PRIORITIES)


if TYPE_CHECKING:
    _Cycle = priority_cycle[str]  # generic in the stubs only
else:
    _Cycle = priority_cycle


class PriorityOrder(_Cycle):
    """Redis: a worker's BRPOP lists its queues high → default → low, whatever the -Q order.

    Redis' BRPOP pops from the first non-empty key it is given, so a worker
    takes a low message only when its high and default queues are empty.
    Set as the transport's `queue_order_strategy` (settings.py).
    """

    def update(self, it: Any) -> None:
        if self.items is None:
            self.items = []
        self.items[:] = sorted(it, key=_rank)  # stable: other queues keep their order


def is_amqp(url: str) -> bool:
    return url.startswith(("amqp://", "amqps://", "pyamqp://"))


def amqp_queue(name: str) -> tuple[Queue, int | None]:
    """RabbitMQ: where a message for the `{priority}.{duration}` queue goes, at which priority.

    RabbitMQ delivers from several queues of one consumer in no defined order
    (consumer priorities, `x-priority`, only rank consumers of the same queue),
    so the priorities of one duration class share one priority queue
    (`x-max-priority`) and the message priority carries the level.
    """
    prefix, duration = split_queue_name(name)
    if prefix not in AMQP_PRIORITY or not duration:
        return Queue(name, durable=True, auto_delete=False), None
    queue = Queue(
        amqp_queue_name(duration),
        durable=True,
        auto_delete=False,
        queue_arguments={"x-max-priority": max(AMQP_PRIORITY.values())},
    )
    return queue, AMQP_PRIORITY[prefix]


@celeryd_after_setup.connect
def _bound_long_queue_prefetch(sender: Any, instance: Any, conf: Any, **_: Any) -> None:
    # A long job holds its process for minutes: a message reserved behind it waits
    # that long, and with the worker cut off, until QUEUED_REPUBLISH_S re-publishes
    # it. Workers of long queues therefore reserve only what their processes run,
    # whatever CELERY_PREFETCH_MULTIPLIER grants the short ones. (The consumer is
    # built but not started yet: its first QoS uses these values.)
    names = [q.name for q in instance.app.amqp.queues.consume_from.values()]
    consumer = getattr(instance, "consumer", None)
    if not names or not all(n.endswith(".long") for n in names) or consumer is None:
        return
    instance.prefetch_multiplier = consumer.prefetch_multiplier = 1
    if consumer.initial_prefetch_count:
        consumer.initial_prefetch_count = max(int(instance.concurrency or 1), 1)


@celeryd_after_setup.connect
def _consume_priority_queues(sender: Any, instance: Any, conf: Any, **_: Any) -> None:
    # On RabbitMQ a worker started with -Q high.short,… also consumes the priority
    # queue of that duration class (where beats publish). The named queues stay
    # consumed too, so messages published to them (before an upgrade) still drain.
    if not is_amqp(str(conf.broker_url or "")):
        return
    queues = instance.app.amqp.queues
    for name in list(queues.consume_from):
        queue, level = amqp_queue(name)
        if level is not None and queue.name not in queues.consume_from:
            queues.select_add(queue)
