"""The one gateway to SQL: named statements, run on Django's connection.

Every statement the apps run lives in a `*.sql` file beside the code that
owns it (`dispatch/sql/`, `core/sql/`), introduced by `-- name: <name>` and a
one-line description; parameters use psycopg's `%(name)s` style. Keeping
them out of Python makes the concurrency rules (SKIP LOCKED, conditional
updates on epoch/token) reviewable in one place, and keeps `row[12]` out of
the code: rows come back as named tuples whose fields are the column names.

The runner uses psycopg's own cursor on Django's connection (so it joins
`transaction.atomic()` blocks) with server-side binding: the firing
statements carry arrays of thousands of values, which Django's client-side
binding would quote into the SQL text one by one. That cursor is wrapped in
Django's cursor wrapper, as every ORM query's is: driver errors come out as
`django.db` errors (DatabaseError, OperationalError...), and the statements
are seen by CaptureQueriesContext and DEBUG's query log (the e2e bench counts
round trips with it).

Being server-side bound, the statements are also the ones psycopg prepares on a
connection after DB_PREPARE_AFTER runs there (DB_PREPARED_STATEMENTS, config/
settings.py): PostgreSQL then keeps their plans instead of planning them over
every day partition of history at every execution (docs/explanation/history.md).

A few statements must run on a dedicated raw connection instead (the beat's
LISTEN, on its own autocommit connection that Django's transactions never
touch): `run_on` runs those.

`unavailable_reason` is the one rule that says when an error means the database
cannot serve a request for now (unreachable, read-only, in recovery, busy) rather
than a fault of the request: the API's exception handler, the web middleware and
/readyz all ask it (docs/explanation/failure-contract.md, "The web while the
database is away").
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from psycopg import sql as pgsql
from psycopg.pq import Format
from psycopg.rows import namedtuple_row

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")

Params = Mapping[str, Any] | None


def load_statements(folder: Path) -> dict[str, str]:
    """Every `-- name:` statement of the `*.sql` files in `folder`, by name."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.sql")):
        name: str | None = None
        lines: list[str] = []
        for line in [*path.read_text().splitlines(), "-- name: __end__"]:
            match = _NAME.match(line)
            if match:
                if name is not None:
                    if name in found:
                        raise RuntimeError(f"duplicate SQL name {name!r} in {path.name}")
                    found[name] = "\n".join(lines).strip()
                name, lines = match.group(1), []
            elif name is not None:
                lines.append(line)
    found.pop("__end__", None)
    return found


class Statements:
    """A folder's named statements and the calls that run them.

    `rows` returns named tuples; `one` the first row or None; `scalar` the
    first column of the first row; `execute` the number of rows affected.
    """

    def __init__(self, folder: Path) -> None:
        self.text = load_statements(folder)

    def __getitem__(self, name: str) -> str:
        return self.text[name]

    def __contains__(self, name: object) -> bool:
        return name in self.text

    def _run(
        self,
        name: str,
        params: Params,
        *,
        binary: bool,
        using: str,
        identifiers: Mapping[str, str] | None = None,
        literals: Params = None,
    ) -> CursorWrapper:
        conn = connections[using]
        conn.ensure_connection()
        raw: psycopg.Cursor[Any] = psycopg.Cursor(conn.connection, row_factory=namedtuple_row)
        raw.format = Format.BINARY if binary else Format.TEXT
        wrapper = _RecordedCursor if conn.queries_logged else CursorWrapper
        cur = wrapper(raw, conn)
        cur.execute(self.composed(name, identifiers, literals), params or {})
        return cur

    def composed(
        self, name: str, identifiers: Mapping[str, str] | None = None, literals: Params = None
    ) -> str | pgsql.Composed:
        """The statement's text, its `{name}` fields filled with `identifiers` quoted as
        SQL identifiers and `literals` quoted as SQL literals: for what PostgreSQL cannot
        bind a parameter into (a LISTEN channel, the tables and partition bounds of
        DDL), and for values a prepared statement's plan must see (the states of a
        partial index's predicate: a generic plan proves it only against constants).
        Without either the text is used as it is."""
        if identifiers is None and literals is None:
            return self.text[name]
        fields: dict[str, pgsql.Composable] = {
            key: pgsql.Identifier(value) for key, value in (identifiers or {}).items()
        }
        fields.update({key: pgsql.Literal(value) for key, value in (literals or {}).items()})
        return pgsql.SQL(self.text[name]).format(**fields)

    # `using` names the database (Django's alias): the primary unless a read-only
    # caller passes core.replicas.reads() — the runner never guesses what a statement does.

    def rows(
        self,
        name: str,
        params: Params = None,
        *,
        binary: bool = True,
        using: str = DEFAULT_DB_ALIAS,
        identifiers: Mapping[str, str] | None = None,
        literals: Params = None,
    ) -> list[Any]:
        """`identifiers` and `literals`: see composed()."""
        with self._run(
            name, params, binary=binary, using=using, identifiers=identifiers, literals=literals
        ) as cur:
            return list(cur.fetchall()) if cur.description else []

    def one(
        self,
        name: str,
        params: Params = None,
        *,
        binary: bool = True,
        using: str = DEFAULT_DB_ALIAS,
        identifiers: Mapping[str, str] | None = None,
        literals: Params = None,
    ) -> Any | None:
        with self._run(
            name, params, binary=binary, using=using, identifiers=identifiers, literals=literals
        ) as cur:
            return cur.fetchone() if cur.description else None

    def scalar(
        self,
        name: str,
        params: Params = None,
        *,
        binary: bool = True,
        using: str = DEFAULT_DB_ALIAS,
        identifiers: Mapping[str, str] | None = None,
        literals: Params = None,
    ) -> Any:
        row = self.one(
            name, params, binary=binary, using=using, identifiers=identifiers, literals=literals
        )
        return None if row is None else row[0]

    def execute(
        self,
        name: str,
        params: Params = None,
        *,
        binary: bool = True,
        identifiers: Mapping[str, str] | None = None,
        literals: Params = None,
    ) -> int:
        """`identifiers` and `literals`: see composed()."""
        with self._run(
            name,
            params,
            binary=binary,
            using=DEFAULT_DB_ALIAS,
            identifiers=identifiers,
            literals=literals,
        ) as cur:
            count: int = cur.rowcount
            return count

    def stream(
        self,
        name: str,
        params: Params = None,
        *,
        identifiers: Mapping[str, str] | None = None,
        itersize: int = 5000,
    ) -> Iterator[Any]:
        """The rows of a statement through a server-side cursor, `itersize` at a time:
        for reads too large to hold in memory at once (a day of history). Runs on
        the primary, inside the caller's transaction (a server-side cursor lives in
        one)."""
        conn = connections[DEFAULT_DB_ALIAS]
        conn.ensure_connection()
        with psycopg.ServerCursor(
            conn.connection, f"stream_{name}", row_factory=namedtuple_row
        ) as cur:
            cur.itersize = itersize
            cur.execute(self.composed(name, identifiers), params or {})
            yield from cur

    def run_on(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        params: Params = None,
        *,
        identifiers: Mapping[str, str] | None = None,
    ) -> list[Any]:
        """Run a statement on `conn`, a dedicated psycopg connection (not Django's):
        its rows as named tuples ([] when it returns none).

        `identifiers` fill the statement's `{name}` fields, quoted as SQL identifiers:
        for the statements PostgreSQL cannot bind a parameter into (LISTEN's channel).
        Without them the text is run as it is, its `%(name)s` parameters bound.
        """
        with conn.cursor(row_factory=namedtuple_row) as cur:
            cur.execute(self.composed(name, identifiers), params)
            return list(cur.fetchall()) if cur.description else []


class _RecordedCursor(CursorDebugWrapper):
    """Django's debug cursor, recording the statement's own text. Django records the
    query the driver last sent, which psycopg does not keep for the execution of a
    prepared statement (DB_PREPARED_STATEMENTS): the record's text would be None."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        text = sql.as_string(self.cursor) if isinstance(sql, pgsql.Composable) else sql
        with self.debug_sql(text, params):
            return CursorWrapper.execute(self, sql, params)


core_sql = Statements(Path(__file__).parent / "sql")


def replace_if_ended_by_server() -> None:
    """Close Django's connection if the server has ended it, so the next statement
    opens a new one (through a multi-host DATABASE_URL: on the current primary).
    Called before each worker task (config/celery_app.py).

    Django's own cursors health-check a reused connection with a `SELECT 1` once per
    request or task (CONN_HEALTH_CHECKS); the runner's raw cursor skips that. Without
    a check, a connection the server ended — a restart, a switchover's demoted
    primary, a crashed backend — failed the next task's first statement: a worker's
    claim, its message then acknowledged and the run left to the beat's re-publish
    (QUEUED_REPUBLISH_S) instead of claimed at once. A round trip per task would break
    the worker's two-per-run budget, so the check is the socket's: an idle connection
    has nothing to read unless the server sent something (its termination notice,
    or the reset of a killed server); only then is it tried with a round trip. A
    machine that vanished without a reset is not seen here: that statement fails.

    Not for the beat: it must see every lost connection (its load watermark is the
    server's), and does — its statements fail, and it reconnects itself.
    """
    conn = connection.connection
    if (
        conn is None
        or connection.in_atomic_block
        or not connection.settings_dict["CONN_HEALTH_CHECKS"]
    ):
        return
    try:
        readable = bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError, psycopg.Error):
        readable = True  # already closed on our side
    if readable and not connection.is_usable():
        connection.close()


@contextmanager
def generic_plans(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Inside, the connection's prepared statements run their generic plans (for the
    statement that reads every day partition in some subqueries and prunes others by
    its values: a custom plan, pruned, always looks cheaper than the generic one, so
    PostgreSQL would plan it afresh over every partition at every execution;
    docs/explanation/history.md). A transaction of its own, or a savepoint of the
    caller's, with the setting restored on the way out. With DB_PREPARED_STATEMENTS
    off nothing keeps a plan, and a generic one made at every execution would cost
    more than the custom one: then it does nothing."""
    if not settings.DB_PREPARED_STATEMENTS:
        yield
        return
    with transaction.atomic(using=using):
        core_sql.rows("plans_generic", using=using)
        yield
        core_sql.rows("plans_default", using=using)


def db_now() -> datetime:
    """The transaction's clock (failure contract C5: docs/explanation/failure-contract.md)."""
    value: datetime = core_sql.scalar("db_now")
    return value


def db_clock() -> datetime:
    """The database's wall clock now (advances within a transaction)."""
    value: datetime = core_sql.scalar("db_clock")
    return value


def notify(channel: str, payload: str) -> None:
    """NOTIFY `channel`; delivered when the surrounding transaction commits."""
    core_sql.one("notify", {"channel": channel, "payload": payload})


def listen(conn: psycopg.Connection[Any], channel: str) -> None:
    """LISTEN `channel` on `conn`, a dedicated autocommit connection (the beat's wake-up)."""
    core_sql.run_on(conn, "listen", identifiers={"channel": channel})


def open_listener(channel: str) -> psycopg.Connection[Any]:
    """A connection of its own (autocommit: Django's transactions never hold it, and a
    notification arrives between them) that LISTENs on `channel`: the beat's and the
    control pump's wake-ups. Raises psycopg.Error when the database refuses it."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    conn = psycopg.connect(**params, autocommit=True)
    try:
        listen(conn, channel)
    except psycopg.Error:
        conn.close()
        raise
    return conn


def ping() -> bool:
    """True when the database answers (raises DatabaseError when it does not)."""
    # Django's cursor wrapper (in _run) turns psycopg's errors into Django's, so
    # /readyz can answer 503 (not 500) while PostgreSQL is down.
    return bool(core_sql.scalar("ping") == 1)


# --- When the database cannot serve a request ------------------------------------


class Unavailable(StrEnum):
    """Why the database cannot serve a request for now (see `unavailable_reason`)."""

    # No connection, or it broke: a network cut, a server stopping or restarting, a
    # session the server ended (the old primary of a switchover ends every one).
    UNREACHABLE = "unreachable"
    # Connected, but writes are refused (SQLSTATE 25006): a standby, or a primary
    # demoted under its sessions; libpq's "session is read-only" when it found no
    # server of a multi-host URL that takes writes.
    READ_ONLY = "read_only"
    # The server is starting up or replaying WAL and takes no connections yet
    # (57P03), or libpq found only hot standbys.
    IN_RECOVERY = "in_recovery"
    # The server aborted the statement but is there: a deadlock, a serialization
    # conflict, a lock or statement timeout, resources exhausted. The transaction
    # rolled back; the connection is still good.
    BUSY = "busy"

    @property
    def sentence(self) -> str:
        return _SENTENCES[self]

    @property
    def reconnect(self) -> bool:
        """Whether the session itself is of no more use: a new connection may reach
        another server (the new primary, when DATABASE_URL names several hosts)."""
        return self is not Unavailable.BUSY


_SENTENCES = {
    Unavailable.UNREACHABLE: "the database cannot be reached",
    Unavailable.READ_ONLY: "the database is read-only (a standby, or a primary being demoted)",
    Unavailable.IN_RECOVERY: "the database is starting up or in recovery",
    Unavailable.BUSY: "the database aborted the request (a conflict, a timeout or a resource limit)",
}
# SQLSTATEs of a session the server has ended or never began: class 08 (connection
# exception) by prefix, and these. 25P03/25P04 (idle-in-transaction and transaction
# timeouts) are InternalError to the driver, but the server closes the session too.
_SESSION_GONE = frozenset({"57P01", "57P02", "57P05", "25P03", "25P04"})
_READ_ONLY = "25006"  # read_only_sql_transaction
_CANNOT_CONNECT_NOW = "57P03"  # starting up, in recovery, shutting down
# A failed connect carries no SQLSTATE, only libpq's text (one line per host tried).
_CONNECT_READ_ONLY = ("session is read-only",)
_CONNECT_RECOVERING = (
    "server is in hot standby mode",
    "the database system is in recovery mode",
    "the database system is starting up",
    "not yet accepting connections",
)
_CONNECTION_ERRORS = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def unavailable_reason(exc: BaseException) -> Unavailable | None:
    """Why `exc` means the database cannot serve the request now, or None when the
    error is the request's own (bad data, a bug: a 4xx or a 500 elsewhere).

    Takes Django's wrapped errors (the driver's is their __cause__) and psycopg's own.
    """
    if isinstance(exc, DatabaseError) and isinstance(exc.__cause__, psycopg.Error):
        driver: BaseException = exc.__cause__
    elif isinstance(exc, DatabaseError | psycopg.Error):
        driver = exc
    else:
        return None
    sqlstate = getattr(driver, "sqlstate", None)
    if sqlstate == _READ_ONLY:
        return Unavailable.READ_ONLY
    if sqlstate == _CANNOT_CONNECT_NOW:
        # "shutting down" is a server going away, not one coming up.
        return (
            Unavailable.UNREACHABLE if "shutting down" in str(driver) else Unavailable.IN_RECOVERY
        )
    if sqlstate in _SESSION_GONE or (sqlstate or "").startswith("08"):
        return Unavailable.UNREACHABLE
    if not isinstance(exc, _CONNECTION_ERRORS):
        return None
    if sqlstate is not None:
        return Unavailable.BUSY  # an OperationalError the server sent about the statement
    text = str(driver)
    if any(part in text for part in _CONNECT_READ_ONLY):
        return Unavailable.READ_ONLY
    if any(part in text for part in _CONNECT_RECOVERING):
        return Unavailable.IN_RECOVERY
    return Unavailable.UNREACHABLE


def forget_connection(*, at_request_end: bool = False) -> None:
    """Drop this thread's database connection: the next query opens a new one.

    Django keeps a persistent connection (CONN_MAX_AGE) after an error as long as it
    still answers `SELECT 1`, and a demoted primary or a standby does: every later
    write of this thread would be refused until the connection aged out. A new
    connection finds the primary of a multi-host DATABASE_URL (target_session_attrs).
    With `at_request_end`, or inside a transaction, the connection is only marked and
    closed when the request ends: the request may still read on it, and closing it
    under a transaction's owner would break that code instead.
    """
    if connection.connection is None:
        return
    if at_request_end or connection.in_atomic_block:
        connection.close_at = 0.0  # close_if_unusable_or_obsolete() closes it at request end
    else:
        connection.close()


def wait_for_writable(timeout_s: float, *, interval_s: float = 0.5) -> bool:
    """Wait up to `timeout_s` until a new connection reaches a server that takes writes
    (through a multi-host DATABASE_URL: the new primary of a fail-over); whether one
    did. For a process that can do nothing without the database and should not drop
    its work meanwhile (a worker's delivery). Errors other than "unavailable" raise."""
    deadline = time.monotonic() + timeout_s
    while True:
        forget_connection()
        try:
            if write_problem() is None:
                return True
        except DatabaseError as exc:
            if unavailable_reason(exc) is None:
                raise
        if time.monotonic() + interval_s > deadline:
            forget_connection()
            return False
        time.sleep(interval_s)


def write_problem() -> Unavailable | None:
    """Whether the server this connection reached refuses writes (None: it takes them);
    raises DatabaseError when it does not answer (see `unavailable_reason`)."""
    (row,) = core_sql.rows("database_state")
    if row.in_recovery:
        return Unavailable.IN_RECOVERY
    return Unavailable.READ_ONLY if row.read_only else None
