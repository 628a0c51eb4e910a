"""Named SQL statements: the claim, lease, fencing and sweep queries, in one place.

Each `*.sql` file here holds statements introduced by `-- name: <name>` and a
one-line description; `queries["<name>"]` returns the text. Parameters use
psycopg's `%(name)s` style. Keeping them out of Python makes the concurrency
rules (SKIP LOCKED, conditional updates on epoch/token) reviewable in one place.
"""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")


def _load() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(Path(__file__).parent.glob("*.sql")):
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


queries = _load()
