"""reference/explainer-codes.md and reference/events.md, from dispatch/states.py.

dispatch/states.py is the platform's one vocabulary (its docstring: "Defined
once"): the explainer's answer codes with their meanings as labels, the
execution reason codes, the execution event kinds, the audit actions, the
alert kinds. Values come from the classes themselves; the words about each
come from the class's own comments, read from its source: a comment block
above members describes them until the next block or blank line, a comment at
the end of a line describes that member alone.
"""

from __future__ import annotations

import inspect
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Any

from reference_pages.markdown import GENERATED_NOTE, code, inline, paragraphs, table

_MEMBER = re.compile(r"^\s+([A-Z][A-Z0-9_]*)\s*(?::[^=]+)?=")


@dataclass
class Group:
    comment: str  # the block above the members ("" before any block)
    members: list[tuple[str, str]] = field(default_factory=list)  # (attribute, inline comment)


def commented_members(cls: type) -> list[Group]:
    """The class body's members in order, grouped under the comment blocks above them."""
    source = inspect.getsource(cls)
    comments: dict[int, str] = {}  # line number → comment text
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    groups = [Group("")]
    block: list[str] = []
    for number, line in enumerate(source.splitlines(), start=1):
        if not line.strip():
            # A blank line ends a group: the members after it are not the comment's.
            if groups[-1].members:
                groups.append(Group(""))
            block = []
            continue
        if number in comments and number not in code_lines:
            block.append(comments[number])  # a comment line of its own
            continue
        match = _MEMBER.match(line)
        if match:
            if block:
                groups.append(Group(" ".join(block)))
                block = []
            groups[-1].members.append((match[1], comments.get(number, "")))
    return [g for g in groups if g.members]


def _choices(cls: Any) -> list[Group]:
    """commented_members, checked against the class's real members (none missed)."""
    groups = commented_members(cls)
    found = [name for g in groups for name, _ in g.members]
    expected = [member.name for member in cls]
    if found != expected:
        raise ValueError(
            f"{cls.__qualname__}: read {found} from the source, the class has {expected}"
        )
    return groups


def _grouped_table(cls: Any, headers: tuple[str, str], *, labels: bool = False) -> str:
    """Each comment group, then its members: a table where they have words of their
    own, else one line listing them (an empty column says nothing)."""
    out = []
    for group in _choices(cls):
        rows = []
        for attribute, note in group.members:
            member = getattr(cls, attribute)
            rows.append([code(member.value), inline(str(member.label) if labels else note)])
        listed = ", ".join(value for value, _ in rows)
        if any(words for _, words in rows):
            if group.comment:
                out.append(f"{inline(group.comment)}\n")
            out.append(table(headers, rows))
        elif group.comment:
            out.append(f"- {inline(group.comment.rstrip('.'))}: {listed}.\n")
        else:
            out.append(f"- {listed}.\n")
    return "\n".join(out)


def _docstring(cls: type) -> str:
    return paragraphs(inspect.getdoc(cls) or "")


def explainer_codes() -> str:
    from dispatch.explain import OUTCOME_CODES
    from dispatch.states import ExplainCode, ReasonCode

    outcome_rows = [
        [code(state.value), code(ExplainCode(answer).value)]
        for state, answer in OUTCOME_CODES.items()
    ]
    return "\n".join(
        [
            GENERATED_NOTE,
            "# Explainer codes\n",
            "`GET /v1/schedules/{id}/explain?at=INSTANT` (and `schedctl why`, and the "
            "console's *why* panel) answers why a schedule did or did not run at an instant. "
            "The answer's `code` is one of the codes below, so a program can tell every "
            "outcome apart; its `sentence` is the same answer in words, fit to show as is, and "
            "its `evidence` links the records it was read from. Read from "
            "`dispatch.states.ExplainCode`.\n",
            "## Answer codes\n",
            _grouped_table(ExplainCode, ("code", "meaning"), labels=True),
            "## An execution that started: its state and the code\n",
            "When the occurrence has an execution that started, the code is its outcome "
            "(`dispatch.explain.OUTCOME_CODES`):\n",
            table(("execution state", "code"), outcome_rows),
            "## Execution reason codes\n",
            "An execution that was skipped, held or cancelled records why in its "
            "`reason_code` (shown with the execution in the API and the console; the "
            "explainer reads it). Read from `dispatch.states.ReasonCode`.\n",
            _docstring(ReasonCode) + "\n",
            _grouped_table(ReasonCode, ("reason code", "note")),
        ]
    )


def events() -> str:
    from dispatch.states import AlertKind, AlertState, AuditAction, EventData, EventKind

    data_rows = [
        [code(getattr(EventData, name)), inline(group.comment)]
        for group in commented_members(EventData)
        for name, _ in group.members
    ]
    return "\n".join(
        [
            GENERATED_NOTE,
            "# Events and audit actions\n",
            "What the platform records as it works, read from `dispatch/states.py`. Execution "
            "events make each execution's timeline (the console's run page, "
            "the explainer, the `scheduler_execution_events` [metric](metrics.md)); audit "
            "actions record who changed what.\n",
            "## Execution event kinds\n",
            _docstring(EventKind) + "\n",
            _grouped_table(EventKind, ("kind", "note")),
            "### Links in an event's data\n",
            _docstring(EventData) + "\n",
            table(("key", "what it names"), data_rows),
            "## Audit actions\n",
            _docstring(AuditAction) + "\n",
            _grouped_table(AuditAction, ("action", "note")),
            "## Alert kinds\n",
            _docstring(AlertKind) + "\n",
            _grouped_table(AlertKind, ("kind", "note")),
            "### Alert delivery states\n",
            _docstring(AlertState) + "\n",
            _grouped_table(AlertState, ("state", "note")),
        ]
    )
