"""`schedctl apply -f FILE|DIR [--prune] [--dry-run [--exit-code]]` and `schedctl export`.

The server decides everything (POST /v1/schedules:apply is one transaction,
keyed by name); the CLI reads the files, shows the answer as a diff with the
next fire times that change, and maps it to exit codes a CI job can use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from scheduler_client import definitions
from scheduler_client.cli.context import EXIT_CHANGES, Context, UsageError, counted

MARKS = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}


def _value(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _runs_text(runs: list[str]) -> str:
    return ", ".join(runs) if runs else "(none)"


def _calendar_lines(calendars: dict[str, Any], *, verbose: bool) -> list[str]:
    lines = []
    for change in calendars.get("changes", []):
        action = change.get("action", "?")
        if action == "unchanged" and not verbose:
            continue
        ident = f" ({change['id']})" if change.get("id") else ""
        lines.append(f"{MARKS.get(action, '?')} {action} calendar {change.get('name')}{ident}")
        for name, diff in (change.get("fields") or {}).items():
            lines.append(f"    {name}: {_value(diff.get('before'))} -> {_value(diff.get('after'))}")
    return lines


def _counts(summary: dict[str, Any], *, dry_run: bool) -> str:
    return (
        ", ".join(
            f"{summary.get(key, 0)} to {key}" if dry_run else f"{summary.get(key, 0)} {key}d"
            for key in ("create", "update", "delete")
        )
        + f", {summary.get('unchanged', 0)} unchanged"
    )


def render_changes(result: dict[str, Any], *, verbose: bool = False) -> str:
    """The apply answer as a reviewable diff: one block per calendar and schedule that
    changes (calendars first: the server applies them first)."""
    calendars = result.get("calendars")
    lines = _calendar_lines(calendars, verbose=verbose) if calendars else []
    for change in result.get("changes", []):
        action = change.get("action", "?")
        if action == "unchanged" and not verbose:
            continue
        ident = f" ({change['id']})" if change.get("id") else ""
        lines.append(f"{MARKS.get(action, '?')} {action} {change.get('name')}{ident}")
        for name, diff in (change.get("fields") or {}).items():
            lines.append(f"    {name}: {_value(diff.get('before'))} -> {_value(diff.get('after'))}")
        runs = change.get("next_runs") or {}
        before, after = runs.get("before") or [], runs.get("after") or []
        if before != after:
            if action == "create":
                lines.append(f"    next runs: {_runs_text(after)}")
            elif action == "delete":
                lines.append(f"    next runs (no more): {_runs_text(before)}")
            else:
                lines.append(f"    next runs before: {_runs_text(before)}")
                lines.append(f"    next runs after:  {_runs_text(after)}")
    dry_run = bool(result.get("dry_run"))
    prefix = "dry run: " if dry_run else ""
    lines.append(f"{prefix}{_counts(result.get('summary', {}), dry_run=dry_run)}")
    if calendars:
        lines.append(f"{prefix}calendars: {_counts(calendars.get('summary', {}), dry_run=dry_run)}")
    return "\n".join(lines) + "\n"


def has_changes(result: dict[str, Any]) -> bool:
    summaries = [result.get("summary", {}), (result.get("calendars") or {}).get("summary", {})]
    return any(s.get(key, 0) for s in summaries for key in ("create", "update", "delete"))


def cmd_apply(args: argparse.Namespace, ctx: Context) -> int:
    try:
        loaded = definitions.load(args.file)
    except definitions.DefinitionError as exc:
        raise UsageError(str(exc)) from None
    result = ctx.client.apply_schedules(
        loaded.definitions, calendars=loaded.calendars, prune=args.prune, dry_run=args.dry_run
    )
    if ctx.json:
        ctx.emit_json(result)
    else:
        ctx.out.write(render_changes(result, verbose=args.verbose))
    if args.exit_code and has_changes(result):
        return EXIT_CHANGES
    return 0


def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    exported = ctx.client.export_definitions()
    schedules, calendars = exported["schedules"], exported.get("calendars") or []
    if ctx.json:
        # The same document as the YAML: without calendars, a file leaves them alone.
        document = {"schedules": schedules} | ({"calendars": calendars} if calendars else {})
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    else:
        text = definitions.dump(schedules, calendars)
    if args.output and args.output != "-":
        Path(args.output).write_text(text, encoding="utf-8")
        also = f" and {counted(len(calendars), 'calendar')}" if calendars else ""
        ctx.warn(f"exported {counted(len(schedules), 'schedule')}{also} to {args.output}")
    else:
        ctx.out.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "apply", help="make the tenant's schedules match a file or folder (one transaction)"
    )
    p.add_argument("-f", "--file", required=True, help="a YAML file, a folder of them, or -")
    p.add_argument(
        "--prune",
        action="store_true",
        help="also delete live schedules (and, when a file has `calendars`, calendars) the files do not name",
    )
    p.add_argument("--dry-run", action="store_true", help="show the changes, write nothing")
    p.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 3 when there are changes (with --dry-run: a CI check that fails on drift)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list unchanged schedules too")
    p.set_defaults(handler=cmd_apply)

    p = subparsers.add_parser(
        "export", help="the tenant's schedules (and calendars) as apply's YAML"
    )
    p.add_argument("-o", "--output", help="write to this file (default stdout)")
    p.set_defaults(handler=cmd_export)
