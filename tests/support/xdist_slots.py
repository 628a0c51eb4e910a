"""Each pytest-xdist worker its own Redis databases (broker and cache), loaded with `-p`.

Imported before pytest-django reads the settings (a `-p` plugin is imported while
the command line is parsed; pytest-django loads the settings in its
`pytest_load_initial_conftests`, before any conftest): the URLs in the environment
are rewritten here, so the settings, and every beat and worker a test starts (they
inherit the environment, tests/support/procs.py), use the worker's own databases.

Worker gwN takes Redis databases 2 + 2N (broker) and 3 + 2N (cache), and the
RabbitMQ virtual host sched-test-gwN (created here, idempotently, with rabbitmqctl);
a run without xdist (the system tier, a developer's `pytest FILE`) keeps databases 0
and 1 and the URL's own virtual host. The DST time-travel clusters take Redis
databases 10 and up, in the system tier. PostgreSQL needs nothing here:
pytest-django names each worker's database test_<name>_gwN itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from urllib.parse import urlsplit, urlunsplit

from core.redis_urls import is_redis, kombu_url, redis_py_url

# Workers past this would reach the time-travel clusters' databases (10 and up).
MAX_WORKERS = 4


def slot() -> int | None:
    """This worker's number (gw0 → 0), None outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return None
    number = int(worker[2:])
    if number >= MAX_WORKERS:
        raise RuntimeError(f"at most {MAX_WORKERS} xdist workers: the Redis databases run out")
    return number


def _rewrite() -> None:
    number = slot()
    if number is None:
        return
    broker = os.environ.get("CELERY_BROKER_URL", "")
    cache = os.environ.get("REDIS_URL", "")
    if is_redis(broker):
        os.environ["CELERY_BROKER_URL"] = kombu_url(redis_py_url(broker, db=2 + 2 * number))
    elif broker.startswith("amqp"):
        os.environ["CELERY_BROKER_URL"] = _own_vhost(broker, f"sched-test-gw{number}")
    if is_redis(cache):
        os.environ["REDIS_URL"] = redis_py_url(cache, db=3 + 2 * number)
    rabbit = os.environ.get("RABBITMQ_URL", "")
    if rabbit:
        os.environ["RABBITMQ_URL"] = _own_vhost(rabbit, f"sched-test-gw{number}")


def _own_vhost(url: str, vhost: str) -> str:
    """`url` on virtual host `vhost`, which exists and its user may use."""
    parts = urlsplit(url)
    user = parts.username or "guest"
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise RuntimeError(
            "RABBITMQ_URL is set but rabbitmqctl is not on PATH: each xdist worker needs a "
            "virtual host of its own (run the main tier on one worker, or unset RABBITMQ_URL)"
        )
    for args in (["add_vhost", vhost], ["set_permissions", "-p", vhost, user, ".*", ".*", ".*"]):
        subprocess.run([ctl, "-q", *args], check=True, capture_output=True, timeout=60)
    return urlunsplit(parts._replace(path=f"/{vhost}"))


_rewrite()
