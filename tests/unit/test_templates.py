"""Template source checks: a Django `{# #}` comment ends on its own line, else the
rest is rendered as page text (a two-line one showed on the schedule form)."""

from __future__ import annotations

from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parents[2] / "templates").rglob("*.html"))


def test_there_are_templates() -> None:
    assert len(TEMPLATES) > 10


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_single_line_comments_close_on_their_line(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        rest = line
        while "{#" in rest:
            rest = rest[rest.index("{#") + 2 :]
            assert "#}" in rest, f"{path.name}:{number}: '{{#' not closed on its line"
            rest = rest[rest.index("#}") + 2 :]
