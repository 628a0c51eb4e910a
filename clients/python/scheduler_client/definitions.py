"""Schedule definitions as files: the YAML of `schedctl apply -f` / `export`.

A file is `{"schedules": [DEF, ...], "calendars": [CAL, ...]}` (either key may be
left out); a folder is every *.yaml / *.yml in it (sorted, not recursive),
concatenated. A name twice is an error naming both places. JSON is YAML, so `.json`
files and stdin ("-") are read the same way. When no file has a `calendars` key the
tenant's calendars are left alone (prune included); when one has, the files own them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUFFIXES = (".yaml", ".yml")


class DefinitionError(ValueError):
    """The file is not a definitions file; the message names the file and the place."""


@dataclass(frozen=True)
class Loaded:
    definitions: list[dict[str, Any]]
    sources: list[str]  # per definition: "file.yaml: schedules[3]"
    calendars: list[dict[str, Any]] | None = None  # None: no file has a `calendars` key


def parse_document(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DefinitionError(f"{source}:{where} not valid YAML: {problem}") from None


def read_text(path: str) -> tuple[str, str]:
    """(text, source name) of a path, "-" being stdin."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except OSError as exc:
        raise DefinitionError(f"{path}: {exc.strerror or exc}") from None


KEYS = ("schedules", "calendars")


def _items(document: dict[str, Any], key: str, source: str) -> list[dict[str, Any]]:
    items = document.get(key) or []
    if not isinstance(items, list):
        raise DefinitionError(f"{source}: {key} must be a list")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DefinitionError(f"{source}: {key}[{i}] must be a mapping")
        if not isinstance(item.get("name"), str) or not item["name"]:
            raise DefinitionError(f"{source}: {key}[{i}].name is required")
    return items


def _document(document: Any, source: str) -> dict[str, Any]:
    if document is None:
        return {}  # an empty file defines nothing
    if not isinstance(document, dict) or set(document) - set(KEYS):
        raise DefinitionError(f'{source}: expected a mapping of "schedules" and/or "calendars"')
    return document


def load(path: str) -> Loaded:
    """The definitions of a file, a folder, or stdin ("-"), in order."""
    if path != "-" and Path(path).is_dir():
        files = sorted(p for p in Path(path).iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise DefinitionError(f"{path}: no *.yaml or *.yml files")
        paths = [str(p) for p in files]
    else:
        paths = [path]
    found: dict[str, list[dict[str, Any]]] = {key: [] for key in KEYS}
    sources: list[str] = []
    has_calendars = False
    seen: dict[tuple[str, str], str] = {}
    for one in paths:
        text, source = read_text(one)
        document = _document(parse_document(text, source), source)
        has_calendars = has_calendars or "calendars" in document
        for key in KEYS:
            for i, item in enumerate(_items(document, key, source)):
                where = f"{source}: {key}[{i}]"
                name = item["name"]
                if (key, name) in seen:
                    raise DefinitionError(
                        f"{key[:-1]} {name!r} is defined twice: {seen[key, name]} and {where}"
                    )
                seen[key, name] = where
                found[key].append(item)
                if key == "schedules":
                    sources.append(where)
    return Loaded(found["schedules"], sources, found["calendars"] if has_calendars else None)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line strings (a command's script, a body) as blocks, readable in review.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(definitions: list[dict[str, Any]], calendars: list[dict[str, Any]] | None = None) -> str:
    """The YAML `export` writes: key order kept, one schedule per list item, then the
    calendars (when there are any: a file without them leaves calendars alone)."""
    document: dict[str, Any] = {"schedules": definitions}
    if calendars:
        document["calendars"] = calendars
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
