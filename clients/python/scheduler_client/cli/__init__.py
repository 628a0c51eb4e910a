"""`schedctl`: the platform from a terminal or a CI job.

Each command module (COMMAND_MODULES) has `register(subparsers)`; each of its
subparsers does `set_defaults(handler=fn)` with `fn(args, ctx) -> int`, the exit
code. main() owns the common options (--url, --token, --json, accepted before or
after the command; --retries and --retry-timeout too), turns errors into `error: ...`
on stderr, and the exit codes:
0 ok, 1 API or network error, 2 usage or invalid input (API 400/422 included),
3 `apply --dry-run --exit-code` found changes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence
from typing import IO

from scheduler_client import config
from scheduler_client.cli.context import (
    EXIT_API,
    EXIT_CHANGES,
    EXIT_OK,
    EXIT_USAGE,
    Context,
    UsageError,
)
from scheduler_client.errors import ApiError, QuotaExceeded, ValidationError

__all__ = ["COMMAND_MODULES", "EXIT_API", "EXIT_CHANGES", "EXIT_OK", "EXIT_USAGE", "main"]

COMMAND_MODULES = ("core", "apply", "imports")


def _common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # On the subcommands the defaults are SUPPRESS, so `schedctl --json ls` and
    # `schedctl ls --json` both work and neither overwrites the other.
    kwargs = {"default": argparse.SUPPRESS} if suppress else {}
    options = (
        ("--url", {"help": "API base URL (else SCHEDCTL_URL, else the config file)"}),
        ("--token", {"help": "API token (else SCHEDCTL_TOKEN, else the config file)"}),
        ("--json", {"action": "store_true", "help": "machine-readable JSON output"}),
        (
            "--retries",
            {
                "type": int,
                "metavar": "N",
                "help": "send a request at most N more times after a 429, a 503 or a lost "
                f"connection (else {config.RETRIES_ENV}, else {config.DEFAULT_RETRIES}; "
                "0: never)",
            },
        ),
        (
            "--retry-timeout",
            {
                "type": float,
                "metavar": "SECONDS",
                "help": "start no retry later than this after the first attempt "
                f"(else {config.RETRY_TIMEOUT_ENV}, else {config.DEFAULT_RETRY_TIMEOUT_S:g})",
            },
        ),
    )
    for flag, spec in options:
        if flag in parser._option_string_actions:
            continue  # the command defines it itself
        parser.add_argument(flag, **spec, **kwargs)  # type: ignore[arg-type]


def _subparser_actions(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:  # type: ignore[type-arg]
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _add_common_everywhere(parser: argparse.ArgumentParser) -> None:
    for action in _subparser_actions(parser):
        for sub in set(action.choices.values()):
            _common_options(sub, suppress=True)
            _add_common_everywhere(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="schedctl", description="Manage schedules, jobs and runs of the scheduling platform."
    )
    _common_options(parser, suppress=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"scheduler_client.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"scheduler_client.cli.{name}":
                raise  # a real import error inside the module: not hidden
            continue  # a command module not shipped (yet): the others still work
        module.register(subparsers)
    _add_common_everywhere(parser)
    return parser


def _print_error(err: IO[str], message: str) -> None:
    err.write(f"error: {message}\n")


def main(
    argv: Sequence[str] | None = None, *, out: IO[str] | None = None, err: IO[str] | None = None
) -> int:
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    parser = build_parser()
    try:
        # argparse writes usage and --help to sys.stdout/stderr: send them to ours.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse: --help is 0, a usage error 2
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    ctx = Context(
        out=out,
        err=err,
        json=args.json,
        url=args.url,
        token=args.token,
        retries=args.retries,
        retry_timeout=args.retry_timeout,
    )
    try:
        code: int = args.handler(args, ctx)
        return code
    except UsageError as exc:
        _print_error(err, str(exc))
        return EXIT_USAGE
    except (ValidationError, QuotaExceeded) as exc:
        _print_error(err, str(exc))
        return EXIT_USAGE
    except ApiError as exc:
        _print_error(err, str(exc))
        return EXIT_API
    except KeyboardInterrupt:
        _print_error(err, "interrupted")
        return 130
    finally:
        ctx.close()
