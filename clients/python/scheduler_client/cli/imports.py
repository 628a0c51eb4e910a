"""`schedctl import crontab|k8s|django-celery-beat`: existing schedules as definitions.

Each prints what it would create with the first runs (computed locally, no server
needed) and the problems with their line numbers; `--apply` sends the definitions
through `POST /v1/schedules:apply` (never pruning), `-o FILE` writes them as a
schedules.yaml for `schedctl apply -f`. Exit 0 without problems, 4 with problems
(the definitions are still printed / applied), 2 for unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from scheduler_client import preview
from scheduler_client.cli.context import Context, UsageError, counted
from scheduler_client.importers import (
    ImportResult,
    TemplateError,
    celery_beat,
    crontab,
    k8s,
    load_template,
)

__all__ = ["EXIT_PROBLEMS", "first_runs", "register"]

EXIT_PROBLEMS = 4
PREVIEW_COUNT = 5


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "import", help="import schedules from crontab, Kubernetes CronJobs or django-celery-beat"
    )
    sources = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--target-template",
            metavar="JSON|@FILE",
            help="the target each definition gets, a JSON object or @file.json/@file.yaml, "
            "with {placeholders} filled in per definition",
        )
        sub.add_argument("--apply", action="store_true", help="create/update the schedules")
        sub.add_argument("-o", "--output", metavar="FILE", help="write them as schedules.yaml")
        sub.add_argument(
            "--after",
            metavar="ISO8601",
            help="preview the runs after this instant (default now)",
        )

    cron = sources.add_parser("crontab", help="a user crontab, or /etc/crontab with --system")
    cron.add_argument("files", nargs="+", metavar="FILE", help="crontab files; - for stdin")
    cron.add_argument("--tz", default="UTC", help="zone of the lines before any CRON_TZ (UTC)")
    cron.add_argument("--system", action="store_true", help="files have a user column")
    common(cron)
    cron.set_defaults(handler=_crontab)

    kube = sources.add_parser("k8s", help="Kubernetes CronJob manifests (multi-document YAML)")
    kube.add_argument("files", nargs="+", metavar="FILE", help="manifest files; - for stdin")
    common(kube)
    kube.set_defaults(handler=_k8s)

    beat = sources.add_parser("django-celery-beat", help="django-celery-beat periodic tasks")
    where = beat.add_mutually_exclusive_group(required=True)
    where.add_argument("--database-url", metavar="URL", help="postgresql://… (read only)")
    where.add_argument("--dump", metavar="FILE", help="`manage.py dumpdata django_celery_beat`")
    beat.add_argument("--tz", default="UTC", help="zone of interval tasks (CELERY_TIMEZONE)")
    common(beat)
    beat.set_defaults(handler=_celery_beat)


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _template(args: argparse.Namespace) -> dict[str, Any] | None:
    try:
        return load_template(args.target_template)
    except TemplateError as exc:
        raise UsageError(str(exc)) from None


def _crontab(args: argparse.Namespace, ctx: Context) -> int:
    template, taken, total = _template(args), set[str](), ImportResult()
    for path in args.files:
        try:
            part = crontab.parse_crontab(
                _read(path), source=path, timezone=args.tz, template=template,
                system=args.system, taken=taken,
            )  # fmt: skip
        except TemplateError as exc:
            raise UsageError(str(exc)) from None
        total.definitions += part.definitions
        total.problems += part.problems
    return _finish(args, ctx, total, unit="line")


def _k8s(args: argparse.Namespace, ctx: Context) -> int:
    template, total = _template(args), ImportResult()
    text = "\n---\n".join(_read(path) for path in args.files)
    try:
        total = k8s.parse_manifest(text, source=",".join(args.files), template=template)
    except (TemplateError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return _finish(args, ctx, total, unit="document")


def _celery_beat(args: argparse.Namespace, ctx: Context) -> int:
    template = _template(args)
    try:
        if args.dump:
            source, tables = args.dump, celery_beat.load_dump(_read(args.dump))
        else:
            source = celery_beat.redact_url(args.database_url)
            tables = celery_beat.load_database(args.database_url)
        result = celery_beat.parse_rows(tables, source=source, timezone=args.tz, template=template)
    except TemplateError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # JSON errors included
        raise UsageError(f"{args.dump or 'database'}: {exc}") from None
    except Exception as exc:  # psycopg's errors: unreachable, no such table, …
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        raise UsageError(f"{celery_beat.redact_url(args.database_url)}: {exc}") from None
    return _finish(args, ctx, result, unit="row id")


def _after(args: argparse.Namespace) -> datetime:
    if not args.after:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(args.after.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--after: {args.after!r} is not an ISO 8601 instant") from None
    if value.tzinfo is None:
        raise UsageError("--after: give a zone, e.g. 2026-12-01T00:00:00Z")
    return value


def first_runs(definition: dict[str, Any], after: datetime) -> list[str]:
    """The definition's first runs after `after`, ISO 8601 UTC (`…Z`)."""
    if "run_at" in definition:
        return [str(definition["run_at"])]
    runs = preview.next_runs(
        definition["cron"], definition.get("timezone", "UTC"), PREVIEW_COUNT, after
    )
    return [r.astimezone(UTC).isoformat().replace("+00:00", "Z") for r in runs]


def _target_summary(target: dict[str, Any]) -> str:
    kind = target.get("type")
    if kind == "http":
        return f"http {target.get('method', 'GET')} {target.get('url')}"
    if kind == "command":
        return f"command {target.get('command')} {json.dumps(target.get('args', {}))}"
    if kind == "queue":
        return f"queue {target.get('exchange')} {target.get('routing_key', '')}".rstrip()
    return json.dumps(target)


def _finish(args: argparse.Namespace, ctx: Context, result: ImportResult, *, unit: str) -> int:
    """`unit` names what Problem.line counts: a crontab line, a manifest's document
    (1-based, `---` separated), a periodic task's row id."""
    after = _after(args)
    listed = [{**d, "next_runs": first_runs(d, after)} for d in result.definitions]
    problems = [p.as_dict() for p in result.problems]
    if args.output:
        text = yaml.safe_dump(
            {"schedules": result.definitions}, sort_keys=False, allow_unicode=True
        )
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    applied = ctx.client.apply_schedules(result.definitions) if args.apply else None
    if ctx.json:
        ctx.emit_json(
            {"definitions": listed, "problems": problems}
            | ({"applied": applied} if applied is not None else {})
        )
    else:
        _print_text(ctx, listed, problems, applied, args.output, unit)
    return EXIT_PROBLEMS if problems else 0


def _print_text(
    ctx: Context,
    listed: list[dict[str, Any]],
    problems: list[dict[str, Any]],
    applied: dict[str, Any] | None,
    output: str | None,
    unit: str,
) -> None:
    verb = "applied" if applied is not None else "would create"
    ctx.print(f"{counted(len(listed), 'definition')} {verb}:")
    for d in listed:
        spec = d.get("cron") or f"once at {d.get('run_at')}"
        extras = [f"{k}={d[k]}" for k in ("concurrency", "misfire", "misfire_grace_s") if k in d]
        if "retry" in d:
            extras.append(f"retry={json.dumps(d['retry'])}")
        if d.get("paused"):
            extras.append("paused")
        ctx.print(f"\n  {d['name']}")
        ctx.print(f"    schedule  {spec}  ({d.get('timezone', 'UTC')})")
        ctx.print(f"    target    {_target_summary(d['target'])}")
        if extras:
            ctx.print(f"    options   {' '.join(extras)}")
        ctx.print(f"    runs      {', '.join(d['next_runs'])}")
    if problems:
        ctx.print(f"\n{counted(len(problems), 'problem')}:")
        for p in problems:
            where = p["source"]
            if p["line"] is not None:
                where += f":{p['line']}" if unit == "line" else f" ({unit} {p['line']})"
            ctx.print(f"  {where}: {p['text'].strip()}")
            ctx.print(f"    → {p['reason']}")
    if output:
        ctx.print(f"\nwrote {counted(len(listed), 'definition')} to {output}")
    if applied is not None:
        s = applied.get("summary", {})
        ctx.print(
            f"\napplied: {s.get('create', 0)} created, {s.get('update', 0)} updated, "
            f"{s.get('unchanged', 0)} unchanged"
        )
