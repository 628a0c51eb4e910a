#!/bin/sh
set -e
exec celery -A config worker -Q high.short,default.short,low.short -n "short@%h" --concurrency "${WORKER_CONCURRENCY:-8}"
