"""The Celery application. Workers: `celery -A config worker -Q high.short,default.short,low.short`."""

from __future__ import annotations

import os

from celery import Celery

from config import embedded

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
embedded.ensure_started()

app = Celery("scheduler")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dispatch"])
