"""The smallest Django project that holds django-celery-beat's real schema: the import
test migrates it into a scratch database (CELERY_BEAT_DATABASE_URL) from a child
process and creates periodic tasks with its own models."""

import os

import dj_database_url

SECRET_KEY = "celery-beat-import-test"  # a throwaway project, no secrets
INSTALLED_APPS = ["django.contrib.contenttypes", "django_celery_beat"]
DATABASES = {"default": dj_database_url.parse(os.environ["CELERY_BEAT_DATABASE_URL"])}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
