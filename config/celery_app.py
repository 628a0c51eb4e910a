"""The Celery application. Workers: `celery -A config worker -Q high.short,default.short,low.short`."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_init

from config import embedded

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.acquire()

app = Celery("scheduler")
app.config_from_object("django.conf:settings", namespace="CELERY")
# dispatch.bench.tasks: the benchmarks' no-op task, consumed only from their own queue.
app.autodiscover_tasks(["dispatch", "dispatch.bench"])


# Celery's Django fixup closes every database connection before and after each
# task unless told to reuse them: a fresh backend per execution (~4.5 ms to
# connect, cold caches) was most of a worker's time. Reuse is bounded instead by
# Django's own rules, applied around each task: CONN_MAX_AGE, and a health check
# so a connection broken by a database restart is replaced, not reused.
app.conf["CELERY_DB_REUSE_MAX"] = 1_000_000


@task_prerun.connect
@task_postrun.connect
def _recycle_db_connections(**_: object) -> None:
    from django.db import close_old_connections

    close_old_connections()


@worker_process_init.connect
def _telemetry_after_fork(**_: object) -> None:
    # Exporter threads and sockets do not survive fork: set up in each pool process.
    from config import telemetry

    telemetry.setup("worker")
