"""reference/schedctl.md: the `schedctl` command line, from its own argparse parser.

`scheduler_client.cli.build_parser()` is the parser `schedctl` runs, so every
command, argument, default and help text here is the one `schedctl … --help`
prints. The exit codes and environment variables come from the constants the
client uses (cli/context.py, config.py); their wording is kept here, keyed by
constant, and the page fails to build when a constant appears or disappears.
"""

from __future__ import annotations

import argparse
from typing import Any

from reference_pages.markdown import GENERATED_NOTE, code, inline, paragraphs, table

# Meaning of each EXIT_* constant of scheduler_client.cli.context.
EXIT_MEANINGS = {
    "EXIT_OK": "success (for `apply --dry-run --exit-code`: no changes)",
    "EXIT_API": "an API or network error",
    "EXIT_USAGE": "usage or invalid input, including the API's 400 and 422 answers",
    "EXIT_CHANGES": "`apply --dry-run --exit-code` found changes",
}
# Meaning of each *_ENV constant of scheduler_client.config.
ENV_MEANINGS = {
    "URL_ENV": "the API base URL, when `--url` is not given",
    "TOKEN_ENV": "the API token, when `--token` is not given",
    "CONFIG_ENV": "the config file to read instead of the one `schedctl login` writes",
    "RETRIES_ENV": "how many more times a request is sent after a 429, a 503 or a lost "
    "connection, when `--retries` is not given",
    "RETRY_TIMEOUT_ENV": "seconds after the first attempt past which no retry starts, when "
    "`--retry-timeout` is not given",
}
COMMON = ("--url", "--token", "--json", "--retries", "--retry-timeout")
WIDTH = 88  # usage lines wrap here, whatever the builder's terminal


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction[Any]]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _argument_rows(parser: argparse.ArgumentParser, *, skip_common: bool) -> list[list[str]]:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if skip_common and set(action.option_strings) & set(COMMON):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = (
                ""
                if action.nargs == 0
                else " " + formatter._format_args(action, action.dest.upper())
            )
            name = ", ".join(code(o + metavar) for o in action.option_strings)
        else:
            name = code(formatter._format_args(action, action.dest))
        help_text = formatter._expand_help(action) if action.help else ""
        details = []
        if action.choices is not None:
            details.append("one of " + ", ".join(code(c) for c in action.choices))
        if isinstance(action, argparse._AppendAction):
            details.append("repeatable")
        if action.option_strings and action.required:
            details.append("required")
        default = action.default
        if (
            action.nargs != 0
            and default not in (None, "", argparse.SUPPRESS)
            and "default" not in (action.help or "")
        ):
            details.append(f"default {code(default)}")
        text = inline(help_text)
        if details:
            text = f"{text} ({'; '.join(details)})" if text else "; ".join(details)
        rows.append([name, text])
    return rows


def _command(parser: argparse.ArgumentParser, summary: str | None, level: int) -> list[str]:
    out = [f"{'#' * level} {parser.prog}\n"]
    if summary:
        out.append(f"{inline(summary[0].upper() + summary[1:])}.\n")
    if parser.description:
        out.append(paragraphs(parser.description) + "\n")
    out.append(f"```text\n{_usage(parser)}\n```\n")
    rows = _argument_rows(parser, skip_common=True)
    if rows:
        out.append(table(("argument", "what it does"), rows))
    for action in _subparsers(parser):
        summaries = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            out += _command(sub, summaries.get(name), min(level + 1, 4))
    if parser.epilog:
        out.append(paragraphs(parser.epilog) + "\n")
    return out


def render() -> str:
    from scheduler_client import config
    from scheduler_client.cli import build_parser, context

    parser = build_parser()
    exits = {n: getattr(context, n) for n in dir(context) if n.startswith("EXIT_")}
    envs = {n: getattr(config, n) for n in dir(config) if n.endswith("_ENV") and n.isupper()}
    for found, known, where in (
        (exits, EXIT_MEANINGS, "scheduler_client.cli.context"),
        (envs, ENV_MEANINGS, "scheduler_client.config"),
    ):
        if set(found) != set(known):
            raise ValueError(
                f"{where} has {sorted(found)}, docs/_ext/reference_pages/cli.py describes "
                f"{sorted(known)}: describe the new ones there"
            )

    out = [
        GENERATED_NOTE,
        "# schedctl\n",
        paragraphs(parser.description) + "\n",
        "Every command and option below is read from the parser `schedctl` runs "
        "(`schedctl COMMAND --help` prints the same). `schedctl` is installed with the "
        "Python client (`clients/python`).\n",
        f"```text\n{_usage(parser)}\n```\n",
        "## Common options\n",
        "Accepted before or after the command (`schedctl --json ls` and `schedctl ls --json` "
        "are the same).\n",
        table(("option", "what it does"), _argument_rows(parser, skip_common=False)),
        "## Where the server, the token and the retry limits come from\n",
        "The option first, then the environment, then — for the server and the token — the "
        "config file (`$XDG_CONFIG_HOME/schedctl/config.toml`, else "
        "`~/.config/schedctl/config.toml`, mode 0600, written by `schedctl login`); retry "
        f"limits set nowhere are {config.DEFAULT_RETRIES} retries within "
        f"{config.DEFAULT_RETRY_TIMEOUT_S:g} s.\n",
        table(
            ("variable", "what it does"),
            [[code(value), inline(ENV_MEANINGS[name])] for name, value in sorted(envs.items())],
        ),
        "## Retries\n",
        "A request answered 429 (throttled) is sent again, whatever its method. One "
        "answered 503 (the platform's database is away: a fail-over, a switchover, a "
        "restart) or that got no answer is sent again only when that is safe: the reads "
        "(`ls`, `get`, `runs`, `why`, `export`), `rm`, `apply` and `import`, `edit` "
        "(conditional on the version), `pause` and `resume`. `create` and `trigger` are "
        "not, because the server may have done them before its database went away: "
        "look before you run them again. The wait is the server's "
        "`Retry-After`, else a backoff from 0.5 s doubling up to 8 s; each retry is noted "
        "on standard error. When the retries run out the last error is printed with how "
        "many attempts were made over how long, and the exit code is 1.\n",
        "## Exit codes\n",
        table(
            ("code", "meaning"),
            [
                [code(value), inline(EXIT_MEANINGS[name])]
                for name, value in sorted(exits.items(), key=lambda item: item[1])
            ],
        ),
        "Errors are printed as `error: …` on standard error; an interrupt (Ctrl-C) exits "
        "with 130.\n",
        "## Commands\n",
    ]
    for action in _subparsers(parser):
        summaries = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            out += _command(sub, summaries.get(name), 3)
    return "\n".join(out)
