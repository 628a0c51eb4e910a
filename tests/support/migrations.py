"""Tests of a data migration: the schema taken back to the migration before it, rows
written with the historical models, then the migrations applied forward."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def schema_at(target: list[tuple[str, str]]) -> Iterator[Any]:
    """The schema migrated back to `target`; yields its historical apps. Migrated forward
    to the latest again on exit, whatever the test did."""
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    try:
        yield executor.loader.project_state(target).apps
    finally:
        migrate_to_latest()


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
