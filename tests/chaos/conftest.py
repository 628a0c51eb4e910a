"""The `chaos` marker (registered here: the suite owns no line of pyproject.toml)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: chaos suite — real beats/workers under injected faults (make chaos)"
    )
