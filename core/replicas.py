"""Reads that may go to a streaming replica, within a stated staleness bound.

With DATABASE_REPLICA_URL set, the views marked `@replica_reads` (the console's
lists, the runs page, the health pages, /metrics) read the `dispatch` app's
tables from the replica while it is at most REPLICA_MAX_LAG_S behind the
primary, and from the primary otherwise (behind the bound, unreachable, or a
statement refused there). Everything else stays on the primary:

* writes, claims, admission and the explainer's decisions — unmarked views and
  every process but the web;
* authentication, sessions, tenants and tokens even inside a marked view: the
  router routes only `dispatch` models, so a revoked token or a removed member is
  refused at once, never after the replica catches up;
* a marked view's POST (only GET and HEAD are routed).

The decision is made once per request and shown on the page (`request.read_source`,
the console's footer) and in an `X-Read-Source` header, so a reader knows how old
what they see may be. The replica's lag is probed at most once per REPLICA_PROBE_S
per process (a cached answer is at most that much older); an unreachable replica
is not asked again for REPLICA_RETRY_S. Named statements read from the replica only
when their caller passes `using=reads()` (core/db.py): the runner never guesses
whether a statement writes. docs/how-to/replicas.md is the operator's page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.http import HttpRequest, HttpResponse

from core.db import core_sql

REPLICA = "replica"
ROUTED_APPS = frozenset({"dispatch"})
SAFE_METHODS = frozenset({"GET", "HEAD"})

log = logging.getLogger("core.replicas")
P = ParamSpec("P")


@dataclass(frozen=True)
class ReadSource:
    """Where a request's routed reads go, and why."""

    alias: str
    lag_s: float | None  # the replica's lag when last probed (None: not probed / unreachable)
    bound_s: float
    why: str

    @property
    def replica(self) -> bool:
        return self.alias == REPLICA

    def header(self) -> str:
        lag = "" if self.lag_s is None else f"; lag={self.lag_s:.1f}"
        return f"{'replica' if self.replica else 'primary'}{lag}; bound={self.bound_s:g}"


_current: ContextVar[ReadSource | None] = ContextVar("read_source", default=None)
_lock = threading.Lock()
_probed: tuple[float, ReadSource] | None = None  # (monotonic time, answer) of this process


def configured() -> bool:
    return REPLICA in settings.DATABASES


def reads() -> str:
    """The alias a read in this context goes to: the replica inside a marked request
    that chose it, else the primary. Pass it as `using=` to read-only named statements."""
    source = _current.get()
    return source.alias if source is not None else DEFAULT_DB_ALIAS


def current() -> ReadSource | None:
    return _current.get()


def _probe() -> ReadSource:
    bound = float(settings.REPLICA_MAX_LAG_S)
    try:
        row = core_sql.one("replica_lag", using=REPLICA)
    except DatabaseError as exc:
        connections[REPLICA].close()
        log.warning("replica unreachable, reading from the primary: %s", exc)
        return ReadSource(DEFAULT_DB_ALIAS, None, bound, "the replica did not answer")
    if row is None:  # an aggregate of functions: one row always; kept honest for the type
        return ReadSource(DEFAULT_DB_ALIAS, None, bound, "the replica did not answer")
    lag = float(row.lag_s)
    if lag > bound:
        return ReadSource(
            DEFAULT_DB_ALIAS, lag, bound, f"the replica is {_seconds(lag)} behind the primary"
        )
    return ReadSource(REPLICA, lag, bound, f"the replica is {_seconds(lag)} behind the primary")


def _seconds(lag: float) -> str:
    return "more than a day" if lag > 86400 else f"{lag:.1f} s"


def choose() -> ReadSource:
    """This process's current answer: the replica if it is within the bound."""
    global _probed
    now = time.monotonic()
    with _lock:
        if _probed is not None:
            at, source = _probed
            # An unreachable replica is left alone longer than a healthy one is re-probed.
            ttl = settings.REPLICA_PROBE_S if source.lag_s is not None else settings.REPLICA_RETRY_S
            if now - at < ttl:
                return source
        source = _probe()
        _probed = (time.monotonic(), source)
        return source


def _primary_after_failure(exc: DatabaseError) -> ReadSource:
    global _probed
    connections[REPLICA].close()
    source = ReadSource(
        DEFAULT_DB_ALIAS, None, float(settings.REPLICA_MAX_LAG_S), "the replica failed a read"
    )
    with _lock:
        _probed = (time.monotonic(), source)
    log.warning("a read on the replica failed, reading from the primary: %s", exc)
    return source


@contextmanager
def reading_from(source: ReadSource) -> Iterator[ReadSource]:
    token = _current.set(source)
    try:
        yield source
    finally:
        _current.reset(token)


def replica_reads(
    view: Callable[Concatenate[HttpRequest, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """Mark a read-only view whose `dispatch` reads may come from the replica."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if not configured() or request.method not in SAFE_METHODS:
            return view(request, *args, **kwargs)
        source = choose()
        try:
            with reading_from(source):
                request.read_source = source  # type: ignore[attr-defined]
                response = view(request, *args, **kwargs)
        except DatabaseError as exc:
            if not source.replica:
                raise
            # A GET is a read: run it again on the primary. Whatever failed — the replica
            # gone, a query cancelled by a recovery conflict — the page is still served.
            source = _primary_after_failure(exc)
            with reading_from(source):
                request.read_source = source  # type: ignore[attr-defined]
                response = view(request, *args, **kwargs)
        response["X-Read-Source"] = source.header()
        return response

    return wrapper  # type: ignore[return-value]


class ReplicaRouter:
    """Django's database router: `dispatch` reads inside a marked request that chose the
    replica go there; every other read, and every write, to the primary."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        source = _current.get()
        if source is not None and source.replica and model._meta.app_label in ROUTED_APPS:
            return REPLICA
        return None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # The replica holds the primary's rows: an object read there relates to one
        # read on the primary.
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db != REPLICA
