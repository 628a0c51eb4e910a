"""Count the database round trips a piece of code makes on Django's connection.

libpq's own protocol trace (psycopg's `pgconn.trace`) records every message;
each round trip ends with one ReadyForQuery from the server, so counting those
counts BEGIN and COMMIT too (CaptureQueriesContext sees only the statements).
The statements' first lines are kept to say what the round trips were.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import connection
from psycopg import pq


@dataclass
class RoundTrips:
    total: int = 0
    sent: list[str] = field(default_factory=list)  # what the client sent, one line each

    def __str__(self) -> str:
        return f"{self.total} round trips: " + "; ".join(self.sent)


@contextlib.contextmanager
def counting() -> Iterator[RoundTrips]:
    """Round trips of Django's connection inside the block (the LISTEN connection and
    any thread's own connection are not counted)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    found = RoundTrips()
    with tempfile.TemporaryFile() as log:
        pgconn.trace(log.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield found
        finally:
            with contextlib.suppress(Exception):
                pgconn.untrace()
            log.seek(0)
            for line in log.read().decode(errors="replace").splitlines():
                parts = line.split("\t")
                if len(parts) < 3:
                    continue
                if parts[0] == "B" and parts[2] == "ReadyForQuery":
                    found.total += 1
                elif parts[0] == "F" and parts[2] in ("Query", "Parse"):
                    text = parts[3].strip() if len(parts) > 3 else ""
                    found.sent.append(_label(text))


def _label(text: str) -> str:
    """A short name for a statement: its first words (the named statements start alike)."""
    text = text.strip().strip('"').lstrip()
    if text.startswith('""'):
        text = text[2:].strip().strip('"')
    return " ".join(text.split()[:6])[:70]
