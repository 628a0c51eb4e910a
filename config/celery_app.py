"""The Celery application. Workers: `celery -A config worker -Q high.short,default.short,low.short`."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init

from config import embedded

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.ensure_started()

app = Celery("scheduler")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dispatch"])


@worker_process_init.connect
def _telemetry_after_fork(**_: object) -> None:
    # Exporter threads and sockets do not survive fork: set up in each pool process.
    from config import telemetry

    telemetry.setup("worker")
