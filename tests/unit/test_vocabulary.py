"""One vocabulary: every event kind the code writes is an EventKind, and the
explainer's codes are ExplainCode's."""

from __future__ import annotations

import re
from pathlib import Path

from core.db import load_statements
from dispatch.explain import CODE_MEANINGS, CODES, OUTCOME_CODES
from dispatch.states import EventKind, ExplainCode, Kind

DISPATCH = Path(__file__).resolve().parents[2] / "dispatch"
# `kind="..."` keywords (events, and a schedule's kind), `Event("...")` of the worker.
_KIND_KEYWORD = re.compile(r"\bkind=\"([a-z_]+)\"")
_WORKER_EVENT = re.compile(r"\bEvent\(\s*\"([a-z_]+)\"")
# A kind literal in an `INSERT INTO dispatch_executionevent ... SELECT ..., id, '<kind>'`.
# `SELECT …, id, 'kind'` and rows of a `VALUES (n, 'kind', …)` list of kinds.
_SQL_KIND = re.compile(r"(?:\bid|\(\d+), '([a-z_]+)'")


def _python_sources() -> list[Path]:
    return [p for p in DISPATCH.rglob("*.py") if "migrations" not in p.parts]


def test_every_event_kind_written_in_python_is_an_event_kind() -> None:
    kinds, schedule_kinds = set(EventKind.values), set(Kind.values)
    found: dict[str, set[str]] = {}
    for path in _python_sources():
        text = path.read_text()
        for literal in _WORKER_EVENT.findall(text):
            found.setdefault(literal, set()).add(path.name)
        for literal in _KIND_KEYWORD.findall(text):
            if literal not in schedule_kinds:
                found.setdefault(literal, set()).add(path.name)
    unknown = {k: v for k, v in found.items() if k not in kinds}
    assert not unknown, f"event kinds missing from dispatch.states.EventKind: {unknown}"


def test_every_event_kind_written_in_sql_is_an_event_kind() -> None:
    statements = load_statements(DISPATCH / "sql")
    written = {
        literal
        for text in statements.values()
        if "INSERT INTO dispatch_executionevent" in text
        for literal in _SQL_KIND.findall(text)
    }
    assert written >= {
        "claimed",
        "attempt_started",
        "held_rate_limit",
    }  # the pattern still finds them
    assert written <= set(EventKind.values), written - set(EventKind.values)


def test_the_explainer_codes_are_explain_codes_with_their_meanings() -> None:
    assert tuple(ExplainCode.values) == CODES
    assert CODE_MEANINGS["skipped_overlap"] == (
        "skipped: the previous run was still active (overlap forbid)"
    )
    assert all(isinstance(meaning, str) and meaning for meaning in CODE_MEANINGS.values())
    assert set(OUTCOME_CODES.values()) <= set(CODES)
