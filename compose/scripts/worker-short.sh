#!/bin/sh
set -e
# WORKER_POOL=threads WORKER_CONCURRENCY=50: one process running 50 I/O-bound HTTP
# callbacks at once (docs/explanation/executions.md, "Worker pools: prefork or threads";
# each thread keeps a database connection).
exec celery -A config worker -Q high.short,default.short,low.short -n "short@%h" \
  --pool "${WORKER_POOL:-prefork}" --concurrency "${WORKER_CONCURRENCY:-8}"
