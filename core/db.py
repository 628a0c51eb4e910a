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

A few statements must run on a dedicated raw connection instead (the beat's
LISTEN, on its own autocommit connection that Django's transactions never
touch): `run_on` runs those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection
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

    def _run(self, name: str, params: Params, *, binary: bool) -> CursorWrapper:
        connection.ensure_connection()
        raw: psycopg.Cursor[Any] = psycopg.Cursor(connection.connection, row_factory=namedtuple_row)
        raw.format = Format.BINARY if binary else Format.TEXT
        wrapper = CursorDebugWrapper if connection.queries_logged else CursorWrapper
        cur = wrapper(raw, connection)
        cur.execute(self.text[name], params or {})
        return cur

    def rows(self, name: str, params: Params = None, *, binary: bool = True) -> list[Any]:
        with self._run(name, params, binary=binary) as cur:
            return list(cur.fetchall()) if cur.description else []

    def one(self, name: str, params: Params = None, *, binary: bool = True) -> Any | None:
        with self._run(name, params, binary=binary) as cur:
            return cur.fetchone() if cur.description else None

    def scalar(self, name: str, params: Params = None, *, binary: bool = True) -> Any:
        row = self.one(name, params, binary=binary)
        return None if row is None else row[0]

    def execute(self, name: str, params: Params = None, *, binary: bool = True) -> int:
        with self._run(name, params, binary=binary) as cur:
            count: int = cur.rowcount
            return count

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
        text: str | pgsql.Composed = self.text[name]
        if identifiers is not None:
            text = pgsql.SQL(self.text[name]).format(
                **{key: pgsql.Identifier(value) for key, value in identifiers.items()}
            )
        with conn.cursor(row_factory=namedtuple_row) as cur:
            cur.execute(text, params)
            return list(cur.fetchall()) if cur.description else []


core_sql = Statements(Path(__file__).parent / "sql")


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


def ping() -> bool:
    """True when the database answers (raises DatabaseError when it does not)."""
    # Django's cursor wrapper (in _run) turns psycopg's errors into Django's, so
    # /readyz can answer 503 (not 500) while PostgreSQL is down.
    return bool(core_sql.scalar("ping") == 1)
