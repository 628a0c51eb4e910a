"""Schedule definitions as files: the YAML of `schedctl apply -f` / `export`.

A file is `{"schedules": [DEF, ...]}`; a folder is every *.yaml / *.yml in it
(sorted, not recursive), concatenated. A name twice is an error naming both
places. JSON is YAML, so `.json` files and stdin ("-") are read the same way.
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


def _definitions(document: Any, source: str) -> list[dict[str, Any]]:
    if document is None:
        return []  # an empty file defines nothing
    if not isinstance(document, dict) or set(document) - {"schedules"}:
        raise DefinitionError(f'{source}: expected a mapping with one key, "schedules"')
    items = document.get("schedules") or []
    if not isinstance(items, list):
        raise DefinitionError(f"{source}: schedules must be a list")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DefinitionError(f"{source}: schedules[{i}] must be a mapping")
        if not isinstance(item.get("name"), str) or not item["name"]:
            raise DefinitionError(f"{source}: schedules[{i}].name is required")
    return items


def load(path: str) -> Loaded:
    """The definitions of a file, a folder, or stdin ("-"), in order."""
    if path != "-" and Path(path).is_dir():
        files = sorted(p for p in Path(path).iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise DefinitionError(f"{path}: no *.yaml or *.yml files")
        paths = [str(p) for p in files]
    else:
        paths = [path]
    definitions: list[dict[str, Any]] = []
    sources: list[str] = []
    seen: dict[str, str] = {}
    for one in paths:
        text, source = read_text(one)
        for i, item in enumerate(_definitions(parse_document(text, source), source)):
            where = f"{source}: schedules[{i}]"
            name = item["name"]
            if name in seen:
                raise DefinitionError(
                    f"schedule {name!r} is defined twice: {seen[name]} and {where}"
                )
            seen[name] = where
            definitions.append(item)
            sources.append(where)
    return Loaded(definitions, sources)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line strings (a command's script, a body) as blocks, readable in review.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(definitions: list[dict[str, Any]]) -> str:
    """The YAML `export` writes: key order kept, one schedule per list item."""
    return yaml.dump(
        {"schedules": definitions},
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
