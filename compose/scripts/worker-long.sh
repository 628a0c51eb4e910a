#!/bin/sh
set -e
exec celery -A config worker -Q high.long,default.long,low.long -n "long@%h" --concurrency "${WORKER_CONCURRENCY:-4}"
