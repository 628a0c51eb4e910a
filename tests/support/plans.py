"""Reading EXPLAIN output of partitioned tables: a plan names the partitions and their
indexes (`dispatch_execution_p20261206`, `..._enqueued_at_idx`), never the table or
index the statement was written against, so a test asks for the whole family."""

from __future__ import annotations

from django.db import connection


def family(relation: str) -> set[str]:
    """`relation` (a table or an index) and every partition of it, at any depth: for a
    partitioned index, the partitions' own indexes attached to it."""
    with connection.cursor() as cur:
        cur.execute(
            "WITH RECURSIVE tree(oid) AS ("
            "  SELECT %s::regclass::oid"
            "  UNION ALL SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid)"
            " SELECT c.relname FROM tree JOIN pg_class c ON c.oid = tree.oid",
            [relation],
        )
        return {row[0] for row in cur.fetchall()}


def names_any(plan: str, relation: str) -> bool:
    """Whether a text plan names `relation` or any partition of it."""
    return not family(relation).isdisjoint(plan.split())
