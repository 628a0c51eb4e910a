"""The everyday commands: login, ls, get, create, edit, pause, resume, trigger,
rm, runs, why, and preview (local: no server needed)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import yaml

from scheduler_client import config, definitions, preview
from scheduler_client.cli.context import Context, UsageError
from scheduler_client.client import Client, api_base
from scheduler_client.errors import NotFound
from scheduler_client.models import Execution, Schedule

# What `runs --failed` means: the server's "recent failures" (dead, failed, timed
# out, or failed once and waiting to retry).
FAILED_STATES = ("failed", "timed_out", "dead", "retry_scheduled")
SCHEDULE_COLUMNS = ("ID", "NAME", "WHEN", "TIMEZONE", "PAUSED", "NEXT RUN", "VERSION")
RUN_COLUMNS = ("ID", "SCHEDULE", "SCHEDULED FOR", "TRIGGER", "ATTEMPT", "STATE", "ERROR")


def _parse_instant(text: str, name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{name}: not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise UsageError(f"{name}: give a UTC offset or Z (e.g. 2026-03-29T01:30:00Z)")
    return value


def _page_size(limit: int) -> int | None:
    # --limit N: ask for N at once (the server allows up to 500 a page), not 50 and a second page.
    return min(limit, 500) if limit > 0 else None


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------- login


def cmd_login(args: argparse.Namespace, ctx: Context) -> int:
    url = getattr(args, "url", None)
    if not url:
        raise UsageError("login: --url is required")
    url = api_base(url)  # saved as the platform's address, with or without /v1 given
    token = getattr(args, "token", None)
    if not token:
        # From stdin, so the secret is in neither the shell history nor `ps`.
        token = sys.stdin.readline().strip() if args.token_stdin or not sys.stdin.isatty() else ""
        if not token:
            raise UsageError("login: give --token TOKEN or pipe it in with --token-stdin")
    if not args.no_verify:
        # One cheap authenticated read: a wrong URL or token fails now, not at the next command.
        with Client(url, token, max_retries=1) as client:
            client.request("GET", "/v1/schedules", params={"limit": 1})
    try:
        path = config.write_file(url, token, warn=ctx.warn)
    except config.ConfigError as exc:
        raise UsageError(f"login: {exc}") from None
    ctx.warn(f"logged in to {url}; saved to {path}")
    return 0


# ---------------------------------------------------------------------- schedules


def _schedule_row(s: Schedule) -> tuple[Any, ...]:
    return (s.id, s.name, s.cron or s.run_at, s.timezone, s.paused, s.next_run_at, s.version)


def _show_schedule(ctx: Context, schedule: Schedule) -> None:
    if ctx.json:
        ctx.emit_json(schedule.raw)
        return
    ctx.table([_schedule_row(schedule)], SCHEDULE_COLUMNS)
    if schedule.paused and schedule.paused_reason:
        ctx.print(f"paused: {schedule.paused_reason}")


def cmd_ls(args: argparse.Namespace, ctx: Context) -> int:
    paused = {"yes": True, "no": False}.get(args.paused or "")
    items = ctx.client.list_schedules(
        search=args.search, kind=args.kind, paused=paused, page_size=_page_size(args.limit)
    )
    found = (
        [s for _, s in zip(range(args.limit), items, strict=False)] if args.limit else list(items)
    )
    if ctx.json:
        ctx.emit_json([s.raw for s in found])
    else:
        ctx.table((_schedule_row(s) for s in found), SCHEDULE_COLUMNS)
    return 0


def cmd_get(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule)
    if ctx.json:
        ctx.emit_json(schedule.raw)
        return 0
    # The whole object, readable: the fields as YAML (what `create -f` takes).
    shown = {k: v for k, v in schedule.raw.items() if v not in (None, [], {})}
    ctx.out.write(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True))
    return 0


def cmd_execution(args: argparse.Namespace, ctx: Context) -> int:
    execution = ctx.client.get_execution(args.execution_id)
    if ctx.json:
        ctx.emit_json(execution.raw)
        return 0
    if execution.archived:
        where = execution.archived
        ctx.print(
            f"archived: its day ({where['day']}, UTC) left the database at"
            f" {where['archived_at']}; read back from {where['location']}"
        )
    shown = {
        k: v
        for k, v in execution.raw.items()
        if v not in (None, [], {}) and k not in ("archived", "events")
    }
    ctx.out.write(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True))
    return 0


def cmd_logs(args: argparse.Namespace, ctx: Context) -> int:
    for line in ctx.client.follow_logs(args.execution_id, attempt=args.attempt, follow=args.follow):
        # One line each as it comes (--json: one object per line), flushed for `-f | grep`.
        if ctx.json:
            ctx.out.write(json.dumps(line) + "\n")
        else:
            ctx.out.write(f"{line['at']} {line['stream']:<6} {line['text']}\n")
        ctx.out.flush()
    return 0


def _definition_from_args(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        loaded = definitions.parse_document(*definitions.read_text(args.file))
        if isinstance(loaded, dict) and isinstance(loaded.get("schedules"), list):
            items = loaded["schedules"]
            if len(items) != 1:
                raise UsageError(f"{args.file}: create takes one schedule (apply takes many)")
            loaded = items[0]
        if not isinstance(loaded, dict):
            raise UsageError(f"{args.file}: expected a mapping (one schedule definition)")
        body: dict[str, Any] = dict(loaded)
    else:
        body = {}
    for key in ("name", "cron", "run_at", "timezone"):
        value = getattr(args, key, None)
        if value is not None:
            body[key] = value
    if args.target_url:
        body["target"] = {"type": "http", "method": args.method, "url": args.target_url}
    body.update(_assignments(args.set or []))
    if not body:
        raise UsageError("create: give -f FILE, or --name, --cron and --target-url")
    return body


def _assignments(pairs: list[str]) -> dict[str, Any]:
    """--set field=value pairs; values are YAML (numbers, true, {"a": 1}), else text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {pair!r}: expected FIELD=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def cmd_create(args: argparse.Namespace, ctx: Context) -> int:
    try:
        body = _definition_from_args(args)
    except definitions.DefinitionError as exc:
        raise UsageError(str(exc)) from None
    _show_schedule(ctx, ctx.client.create_schedule(body))
    return 0


def cmd_edit(args: argparse.Namespace, ctx: Context) -> int:
    changes: dict[str, Any] = {}
    if args.file:
        try:
            loaded = definitions.parse_document(*definitions.read_text(args.file))
        except definitions.DefinitionError as exc:
            raise UsageError(str(exc)) from None
        if not isinstance(loaded, dict):
            raise UsageError(f"{args.file}: expected a mapping of the fields to change")
        changes.update(loaded)
    changes.update(_assignments(args.set or []))
    if not changes:
        raise UsageError("edit: nothing to change: give --set FIELD=VALUE or -f FILE")
    schedule = ctx.client.find_schedule(args.schedule)
    # The version read now unless the caller pins the one they reviewed: a change in
    # between is then a 409, not a silent overwrite.
    version = args.version if args.version is not None else schedule.version
    if version is None:
        raise UsageError("edit: the server did not say the schedule's version; pass --version")
    _show_schedule(ctx, ctx.client.update_schedule(schedule.id, changes, version=version))
    return 0


def cmd_pause(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule)
    _show_schedule(
        ctx, ctx.client.pause_schedule(schedule.id, reason=args.reason, until=args.until)
    )
    return 0


def cmd_resume(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule)
    _show_schedule(ctx, ctx.client.resume_schedule(schedule.id))
    return 0


def cmd_trigger(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule)
    execution = ctx.client.trigger_schedule(schedule.id)
    if ctx.json:
        ctx.emit_json(execution.raw)
    else:
        ctx.table([_run_row(execution, {schedule.id: schedule.name})], RUN_COLUMNS)
    return 0


def cmd_rm(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule)
    ctx.client.delete_schedule(schedule.id)
    if ctx.json:
        ctx.emit_json({"deleted": schedule.id, "name": schedule.name})
    else:
        ctx.print(f"deleted {schedule.name} ({schedule.id})")
    return 0


# ---------------------------------------------------------------------- runs and why


def _run_row(e: Execution, names: Mapping[str, str]) -> tuple[Any, ...]:
    """A run's table row; its schedule by name (`names`, by id), else by id."""
    schedule = names.get(e.schedule_id or "", e.schedule_id)
    return (e.id, schedule, e.scheduled_for, e.trigger, e.attempt, e.state, e.error)


def _schedule_names(
    client: Client, runs: list[Execution], known: Schedule | None
) -> dict[str, str]:
    """The name of each run's schedule, by id (a run carries only its schedule's id): one
    read per schedule not already `known`; a deleted schedule (not found) is left out, its
    runs keep its id."""
    names = {known.id: known.name} if known is not None else {}
    for schedule_id in dict.fromkeys(e.schedule_id for e in runs if e.schedule_id):
        if schedule_id not in names:
            with contextlib.suppress(NotFound):
                names[schedule_id] = client.get_schedule(schedule_id).name
    return names


def cmd_runs(args: argparse.Namespace, ctx: Context) -> int:
    schedule = ctx.client.find_schedule(args.schedule) if args.schedule else None
    schedule_id = schedule.id if schedule else None
    states: list[str] | None = list(FAILED_STATES) if args.failed else None
    if args.state:
        states = [*(states or []), *args.state.split(",")]
    items = ctx.client.list_executions(
        schedule_id=schedule_id, state=states, page_size=_page_size(args.limit)
    )
    found = (
        [e for _, e in zip(range(args.limit), items, strict=False)] if args.limit else list(items)
    )
    if ctx.json:
        ctx.emit_json([e.raw for e in found])
    else:
        names = _schedule_names(ctx.client, found, schedule)
        ctx.table((_run_row(e, names) for e in found), RUN_COLUMNS)
    return 0


def cmd_why(args: argparse.Namespace, ctx: Context) -> int:
    at = _iso(_parse_instant(args.at, "--at"))
    schedule = ctx.client.find_schedule(args.schedule)
    answer = ctx.client.explain(schedule.id, at)
    if ctx.json:
        ctx.emit_json(answer.raw)
        return 0
    ctx.print(answer.sentence)
    ctx.print(f"  code: {answer.code}")
    if answer.occurrence:
        ctx.print(f"  occurrence: {answer.occurrence}")
    if answer.execution_id:
        ctx.print(f"  execution: {answer.execution_id}")
    for note in answer.notes or []:
        ctx.print(f"  note: {note}")
    if answer.evidence:
        ctx.print("evidence:")
        for item in answer.evidence:
            label = f" {item.label}" if item.label else ""
            url = f"  {item.url}" if item.url else ""
            ctx.print(f"  - {item.kind} {item.id}{label}{url}")
    return 0


# ---------------------------------------------------------------------- preview


def cmd_preview(args: argparse.Namespace, ctx: Context) -> int:
    after = _parse_instant(args.after, "--after") if args.after else None
    try:
        found = preview.occurrences(args.expr, args.tz, args.count, after, seed=args.seed)
        description = preview.describe(args.expr, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if ctx.json:
        ctx.emit_json(
            {
                "cron": args.expr,
                "timezone": args.tz,
                "description": description,
                "next_runs": [
                    {
                        "scheduled_for": _iso(o.scheduled_for),
                        "local": o.local.isoformat(),
                        "note": o.note,
                    }
                    for o in found
                ],
            }
        )
        return 0
    ctx.print(description)
    ctx.table(
        ((_iso(o.scheduled_for), o.local.strftime("%a %Y-%m-%d %H:%M %Z"), o.note) for o in found),
        ("UTC", f"LOCAL ({args.tz})", "NOTE"),
    )
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser("login", help="save the server URL and token (config file, 0600)")
    p.add_argument("--token-stdin", action="store_true", help="read the token from stdin")
    p.add_argument("--no-verify", action="store_true", help="save without checking the token")
    p.set_defaults(handler=cmd_login)

    p = subparsers.add_parser("ls", help="list schedules")
    p.add_argument("--search", help="text in the name")
    p.add_argument("--kind", choices=("cron", "once"))
    p.add_argument("--paused", choices=("yes", "no"))
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    p.set_defaults(handler=cmd_ls)

    ref = {"help": "schedule id, or its exact name"}
    p = subparsers.add_parser("get", help="one schedule, every field")
    p.add_argument("schedule", **ref)
    p.set_defaults(handler=cmd_get)

    p = subparsers.add_parser(
        "execution", help="one execution with its timeline (archived ones too)"
    )
    p.add_argument("execution_id")
    p.set_defaults(handler=cmd_execution)

    p = subparsers.add_parser("create", help="create a schedule (from -f FILE and/or flags)")
    p.add_argument("-f", "--file", help="a definition as YAML or JSON ('-': stdin)")
    p.add_argument("--name")
    p.add_argument("--cron")
    p.add_argument("--run-at", dest="run_at")
    p.add_argument("--tz", dest="timezone")
    p.add_argument("--target-url", help="an HTTP target's URL")
    p.add_argument("--method", default="POST", help="the HTTP target's method (default POST)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="any other field")
    p.set_defaults(handler=cmd_create)

    p = subparsers.add_parser("edit", help="change fields of a schedule (If-Match: its version)")
    p.add_argument("schedule", **ref)
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="a field to change")
    p.add_argument("-f", "--file", help="the fields to change, as YAML or JSON")
    p.add_argument("--version", type=int, help="fail (409) unless still at this version")
    p.set_defaults(handler=cmd_edit)

    p = subparsers.add_parser("pause", help="pause a schedule")
    p.add_argument("schedule", **ref)
    p.add_argument("--reason", default="", help="shown in the console and the explainer")
    p.add_argument("--until", help="resume by itself at this instant (ISO 8601)")
    p.set_defaults(handler=cmd_pause)

    for name, handler, text in (
        ("resume", cmd_resume, "resume a paused schedule"),
        ("trigger", cmd_trigger, "run a schedule now"),
        ("rm", cmd_rm, "delete a schedule"),
    ):
        p = subparsers.add_parser(name, help=text)
        p.add_argument("schedule", **ref)
        p.set_defaults(handler=handler)

    p = subparsers.add_parser("runs", help="recent executions, newest first")
    p.add_argument("schedule", nargs="?", help="only this schedule's (id or name)")
    p.add_argument("--failed", action="store_true", help="only " + ", ".join(FAILED_STATES))
    p.add_argument("--state", help="only these states, comma-separated")
    p.add_argument("--limit", type=int, default=20, help="at most this many (0: all; default 20)")
    p.set_defaults(handler=cmd_runs)

    p = subparsers.add_parser("logs", help="an attempt's live log (-f: follow it to its end)")
    p.add_argument("execution_id")
    p.add_argument("--attempt", type=int, help="which attempt (default: the latest)")
    p.add_argument("-f", "--follow", action="store_true", help="wait for lines until it ends")
    p.set_defaults(handler=cmd_logs)

    p = subparsers.add_parser("why", help="why a schedule did or did not run at a time")
    p.add_argument("schedule", **ref)
    p.add_argument("--at", required=True, help="the instant, ISO 8601 with Z or an offset")
    p.set_defaults(handler=cmd_why)

    p = subparsers.add_parser("preview", help="next fire times of a cron expression (local)")
    p.add_argument("expr", help="cron expression, e.g. '0 9 * * 1-5'")
    p.add_argument("--tz", default="UTC", help="IANA zone (default UTC)")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--after", help="start after this instant (ISO 8601, default now)")
    p.add_argument("--seed", default="", help="schedule id that resolves H fields")
    p.set_defaults(handler=cmd_preview)
