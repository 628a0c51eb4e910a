"""Importers: existing schedules (crontab, Kubernetes CronJobs, django-celery-beat)
turned into schedule definitions (the DEFs `POST /v1/schedules:apply` accepts).

Each importer is a pure function returning ImportResult: the definitions it could
translate and a Problem for everything it could not (or could only in part) — a
line is never skipped silently. Cron syntax is judged by the platform's own cron
module (`scheduler_client.timing.cron`), so what imports here saves there.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler_client.timing import cron as _cron

__all__ = [
    "ImportResult",
    "Problem",
    "TemplateError",
    "command_name",
    "cron_problem",
    "fill_template",
    "load_template",
    "slug",
    "unique_name",
]

# Whole-string placeholders whose value is structured (celery args/kwargs): the
# template `"body": "{kwargs}"` receives the object itself, not its JSON text.
_STRUCTURED = {"{args}", "{kwargs}"}
_PLACEHOLDER_RE = re.compile(r"\{(command|name|task|args|kwargs|image|queue)\}")


class TemplateError(ValueError):
    """The --target-template is missing, unreadable or not a JSON/YAML object."""


@dataclass(frozen=True)
class Problem:
    source: str  # file name, URL (password removed) or "dump"
    line: int | None  # 1-based line (crontab), document index (k8s), row id (celery)
    text: str  # the input as found
    reason: str  # why it was not imported (or imported with a difference)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text, "reason": self.reason}


@dataclass
class ImportResult:
    definitions: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def load_template(value: str | None) -> dict[str, Any] | None:
    """`--target-template`: inline JSON, or @file.json / @file.yaml."""
    if value is None:
        return None
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TemplateError(f"--target-template: cannot read {path}: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text)  # JSON is YAML too
        except yaml.YAMLError as exc:
            raise TemplateError(f"--target-template: {path} is not JSON or YAML: {exc}") from None
    else:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TemplateError(f"--target-template: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or "type" not in data:
        raise TemplateError(
            "--target-template: must be a target object with a 'type', "
            'e.g. {"type": "http", "method": "POST", "url": "https://.../{name}"}'
        )
    return data


def fill_template(template: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of the template with `{placeholder}`s in its strings replaced.

    Text placeholders are substituted inside strings; a string that is exactly
    "{args}" or "{kwargs}" becomes the value itself (a list / an object).
    """

    def fill(node: Any) -> Any:
        if isinstance(node, str):
            if node in _STRUCTURED and node[1:-1] in values:
                return copy.deepcopy(values[node[1:-1]])
            return _PLACEHOLDER_RE.sub(
                lambda m: _text(values[m.group(1)]) if m.group(1) in values else m.group(0), node
            )
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        return node

    result: dict[str, Any] = fill(template)
    return result


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def cron_problem(expr: str, tz: str) -> str | None:
    """The platform's reason an expression or zone is refused, None when it is valid."""
    try:
        _cron.validate(expr, tz, seed="")
    except _cron.CronError as exc:
        return exc.message
    return None


# A crontab line is a shell line; its name should say what the job is, not how the
# shell runs it. Programs that only prepare or wrap the real command, with the options
# of theirs that take a value and how many arguments come before the command:
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "--class", "--classdata"}), 0),
    "sudo": (frozenset({"-u", "-g", "--user", "--group"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),  # the duration
    "flock": (frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}), 1),  # the lock
    "nohup": (frozenset(), 0),
    "env": (frozenset({"-u", "--unset"}), 0),
    "exec": (frozenset(), 0),
    "time": (frozenset(), 0),
    "chronic": (frozenset(), 0),
    "setsid": (frozenset(), 0),
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
# Interpreters: the script they run names the job (`python3 /opt/jobs/cleanup.py`).
_INTERPRETER_RE = re.compile(r"^(python[0-9.]*|perl|ruby|php[0-9.]*|node|nodejs|rscript)$")
# Segments that only set the scene for the next one (`cd /srv && ./job`).
_SETUP = frozenset(
    {"cd", "sleep", "test", "[", "[[", "true", ":", "export", "source", ".", "umask", "set"}
)
_ASSIGNMENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR_CHARS = frozenset("();<>|&")
NAME_ARGUMENTS = 2  # a command's first words after its program that go into its name


def slug(text: str, *, limit: int = 60) -> str:
    """Lower-case words of `text` joined by `-` (at most `limit` characters); "" if none."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))[:limit].strip("-")


def _tokens(command: str) -> list[str]:
    """Shell words, with operators (`|`, `&&`, `;`, `>`, `2>&1`'s `>&`) as words of their own."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote or a trailing backslash: plain words will do
        return command.split()


def _segments(tokens: list[str]) -> list[list[str]]:
    """The simple commands of a line (split at `|`, `&&`, `||`, `;`, `&`), each without
    its redirections (`> /dev/null`, `2>&1`, `< in`) and their targets."""
    segments: list[list[str]] = [[]]
    skip = False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if token and set(token) <= _OPERATOR_CHARS:
            if "<" in token or ">" in token:
                skip = True  # the redirection's file or descriptor
                current = segments[-1]
                if current and current[-1].isdigit() and i and tokens[i - 1] == current[-1]:
                    current.pop()  # the `2` of `2>&1`, split from its operator
            elif token not in ("(", ")"):
                segments.append([])
            continue
        segments[-1].append(token)
    return [s for s in segments if s]


def _base(word: str) -> str:
    """A path's last part without its extension: `/opt/bin/report.sh` → `report`."""
    tail = word.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"(?<=.)\.[A-Za-z0-9]{1,4}$", "", tail)


def _command_words(words: list[str], depth: int = 0) -> list[str]:
    """The program (or script) that names a simple command, then its first arguments."""
    rest = list(words)
    while rest and _ASSIGNMENT_RE.match(rest[0]):
        rest.pop(0)  # `LANG=C job`: the environment is not the job
    while rest and _base(rest[0]).lower() in _WRAPPERS:
        valued, positional = _WRAPPERS[_base(rest.pop(0)).lower()]
        while rest and (rest[0].startswith("-") or _ASSIGNMENT_RE.match(rest[0])):
            if rest.pop(0) in valued and rest:
                rest.pop(0)
        del rest[:positional]
    if not rest:
        return []
    program = _base(rest.pop(0)).lower()
    if program in _SHELLS or _INTERPRETER_RE.match(program):
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            if option == "-c" and rest and program in _SHELLS and depth < 2:
                return command_words(rest[0], depth + 1)  # `sh -c "…"`: the line it runs
            if option == "-m" and rest:  # `python -m pkg.job`: the module's last part
                rest[0] = rest[0].rsplit(".", 1)[-1]
                break
        if rest:
            program = _base(rest.pop(0)).lower()  # the script names it, not its interpreter
    arguments = [
        _base(w) if "/" in w else w
        for w in rest
        if not w.startswith(("-", "+")) and "$" not in w and "`" not in w
    ]
    return [program, *[a for a in arguments if slug(a)][:NAME_ARGUMENTS]]


def command_words(command: str, depth: int = 0) -> list[str]:
    """The words that name a shell line's job: its first simple command that does more
    than set the scene, without wrappers, shells, interpreters and redirections."""
    segments = _segments(_tokens(command))
    for segment in segments:
        words = _command_words(segment, depth)
        if words and words[0] not in _SETUP:
            return words
    return _command_words(segments[0], depth) if segments else []


def command_name(command: str, *, limit: int = 60) -> str:
    """A readable name for a shell line's job: `/opt/report.sh > /dev/null 2>&1` →
    `report`, `cd /srv && python3 manage.py clearsessions` → `manage-clearsessions`,
    `/usr/bin/mysqldump shop | gzip > /backup/shop.sql.gz` → `mysqldump-shop`."""
    return slug(" ".join(command_words(command)), limit=limit) or "job"


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, else `name-2`, `name-3`, …; the result is added to `taken`."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate
