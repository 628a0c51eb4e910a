"""The history tests' S3 server (moto as a real subprocess, tests/support/s3.py) and
the day partitions put back after each test (tests/support/history.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.history import restore_days
from tests.support.s3 import moto_endpoint  # noqa: F401 - a fixture, made visible to the tests here


@pytest.fixture(autouse=True)
def days_back(request: Any) -> Iterator[None]:
    yield
    if request.node.get_closest_marker("django_db") is not None:
        restore_days()
