"""Round trips and statements of Django's connection, read from libpq's protocol trace:
the one way the tests (the beat's and the worker's round-trip budgets) and the benches
(`bench e2e`) count what a piece of code costs the database.

Each round trip ends with one ReadyForQuery from the server, so BEGIN and COMMIT
count too (CaptureQueriesContext sees only the statements). A statement is one Query
(the simple protocol) or one Execute (the extended one). With prepared statements
(DB_PREPARED_STATEMENTS) a statement's text is sent once per connection, in a Parse
that names it, perhaps before the trace began; its executions send only a Bind that
names it, so the text is looked up by that name (or the name is shown).

libpq buffers its trace: only the end of the trace (PQuntrace flushes it) gives exact
counts, so one stretch is traced at a time.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.db import connection
from psycopg import pq

from core.db import core_sql


@dataclass
class Trace:
    round_trips: int = 0
    statements: list[str] = field(default_factory=list)  # each one's first words
    # Prepared statements run in the trace whose Parse came before it: their names
    # stand in the list of statements until `traced` looks their texts up.
    prepared_before: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        return f"{self.round_trips} round trips: " + "; ".join(self.statements)


@contextlib.contextmanager
def traced() -> Iterator[Trace]:
    """What Django's connection sent inside the block, filled in when it ends (the
    LISTEN connection and other threads' connections are not counted)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    found = Trace()
    with tempfile.TemporaryFile() as log:
        pgconn.trace(log.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield found
        finally:
            with contextlib.suppress(Exception):
                pgconn.untrace()
            log.seek(0)
            read(log.read().decode(errors="replace"), into=found)
            _name_prepared(found, connection.connection)


def _name_prepared(found: Trace, conn: psycopg.Connection[Any]) -> None:
    """The texts of the statements prepared before the trace, asked of the server
    after it (not counted); left as their names if it cannot answer now (a failed
    transaction)."""
    if not found.prepared_before:
        return
    with contextlib.suppress(psycopg.Error):
        rows = core_sql.run_on(
            conn, "prepared_statement_texts", {"names": sorted(found.prepared_before)}
        )
        labels = {row.name: _label(row.statement) for row in rows}
        found.statements = [labels.get(s, s) for s in found.statements]


# The fields of the messages read. libpq prints a string in double quotes as it is
# (quotes and line breaks inside it too), so a statement's text runs on over the next
# lines: its first line is what is read here.
_TEXT = re.compile(r'^\s*"(.*?)(?:"(?:\s+\d+)*)?\s*$')  # Query: "text"
_PARSE = re.compile(r'^\s*"([^"]*)"\s*"(.*?)(?:"(?:\s+\d+)*)?\s*$')  # "name" "text" types
_BIND = re.compile(r'^\s*"[^"]*"\s*"([^"]*)"')  # "portal" "statement name" ...


def read(text: str, *, into: Trace) -> None:
    """Add the round trips and statements of a REGRESS_MODE trace to `into`."""
    parsed: dict[str, str] = {}  # statement name ("": the unnamed one) -> its label
    bound = ""
    for line in text.splitlines():
        parts = line.split("\t", 3)
        if len(parts) < 3:
            continue
        side, message, rest = parts[0], parts[2], parts[3] if len(parts) > 3 else ""
        if side == "B" and message == "ReadyForQuery":
            into.round_trips += 1
        elif side != "F":
            continue
        elif message == "Query" and (match := _TEXT.match(rest)):
            into.statements.append(_label(match.group(1)))
        elif message == "Parse" and (match := _PARSE.match(rest)):
            parsed[match.group(1)] = _label(match.group(2))
        elif message == "Bind" and (match := _BIND.match(rest)):
            name = match.group(1)
            if name not in parsed:
                into.prepared_before.add(name)
            bound = parsed.get(name, name)
        elif message == "Execute":
            into.statements.append(bound)


def _label(text: str) -> str:
    """A short name for a statement: its first words (the named statements start alike)."""
    return " ".join(text.split()[:6])[:70]
