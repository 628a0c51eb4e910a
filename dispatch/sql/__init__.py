"""The dispatch app's named SQL statements (see core/db.py for the runner).

`sql.rows("<name>", params)` runs one; `queries["<name>"]` is the text.
"""

from __future__ import annotations

from pathlib import Path

from core.db import Statements

sql = Statements(Path(__file__).parent)
# The statement texts by name (kept for callers that need the raw text).
queries = sql.text
