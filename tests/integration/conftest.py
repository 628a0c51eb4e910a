"""Fixtures shared by the integration tests: the console personas' world."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.console_support import World, build_world


@pytest.fixture
def world(db: Any) -> World:
    """The console personas and objects (tests/support/console_support.py); a module
    that needs more in its world overrides this fixture, requesting `world` to extend it."""
    return build_world()
