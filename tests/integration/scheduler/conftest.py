"""Shared fixtures of the in-process beat tests: empty queues around a test, and one
beat per test started as the module's `beat_config` says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.beat_support import Beat, empty_queues, running_beat


@pytest.fixture
def empty_broker() -> Iterator[None]:
    """The platform's queues empty before and after the test (modules use it with usefixtures)."""
    with empty_queues():
        yield


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    """The module's beat: its name and BeatConfig fields (running_beat's defaults otherwise).
    A module overrides this fixture."""
    return {"name": "test-beat"}


@pytest.fixture
def beat(db: Any, beat_config: dict[str, Any]) -> Iterator[Beat]:
    """An in-process beat owning every partition, shut down when the test ends."""
    config = dict(beat_config)
    with running_beat(config.pop("name"), **config) as b:
        yield b
