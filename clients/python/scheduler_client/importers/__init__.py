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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler_client.timing import cron as _cron

__all__ = [
    "ImportResult",
    "Problem",
    "TemplateError",
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


def slug(text: str, *, limit: int = 60) -> str:
    """A readable name from a command: `/usr/bin/backup.sh --full` → `backup-sh-full`."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    # Path prefixes say nothing about the job (`/usr/local/bin/...`): keep the tail.
    tail = text.split()[0].rsplit("/", 1)[-1] if text.split() else ""
    if tail:
        words = re.findall(r"[a-z0-9]+", " ".join([tail.lower(), *text.lower().split()[1:]]))
    name = "-".join(words)[:limit].strip("-")
    return name or "job"


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, else `name-2`, `name-3`, …; the result is added to `taken`."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate
