"""The everyday commands: login, ls, get, create, edit, pause, resume, trigger,
rm, runs, why, and preview (local: no server needed)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from scheduler_client import config, preview
from scheduler_client.cli.context import Context, UsageError


def _parse_instant(text: str, name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{name}: not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise UsageError(f"{name}: give a UTC offset or Z (e.g. 2026-03-29T01:30:00Z)")
    return value


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------- login


def cmd_login(args: argparse.Namespace, ctx: Context) -> int:
    url = getattr(args, "url", None)
    if not url:
        raise UsageError("login: --url is required")
    token = getattr(args, "token", None)
    if not token:
        # From stdin, so the secret is in neither the shell history nor `ps`.
        token = sys.stdin.readline().strip() if args.token_stdin or not sys.stdin.isatty() else ""
        if not token:
            raise UsageError("login: give --token TOKEN or pipe it in with --token-stdin")
    path = config.write_file(url, token)
    ctx.warn(f"logged in to {url}; saved to {path}")
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
    p.set_defaults(handler=cmd_login)

    p = subparsers.add_parser("preview", help="next fire times of a cron expression (local)")
    p.add_argument("expr", help="cron expression, e.g. '0 9 * * 1-5'")
    p.add_argument("--tz", default="UTC", help="IANA zone (default UTC)")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--after", help="start after this instant (ISO 8601, default now)")
    p.add_argument("--seed", default="", help="schedule id that resolves H fields")
    p.set_defaults(handler=cmd_preview)
