"""crontab(5) → schedule definitions.

User crontabs (`m h dom mon dow command`) and, with `system=True`, /etc/crontab and
/etc/cron.d files (a user column before the command). Cronie semantics for the
zone: a `CRON_TZ=` (or `TZ=`) line changes the zone of the lines after it. Every
line that is not imported, or not imported exactly, becomes a Problem with its
line number: @reboot, `%` (stdin in cron), MAILTO/SHELL/PATH and other variables,
the user column, a trailing backslash (cron has no line continuation) and
expressions the platform's cron module refuses (with its reason).

Day of month and day of week both restricted (`0 9 1 * 1`): cron runs on a day
matching EITHER; the platform's cron module does the same (Vixie semantics).
"""

from __future__ import annotations

import re
from typing import Any

from scheduler_client.importers import (
    ImportResult,
    Problem,
    TemplateError,
    command_name,
    cron_problem,
    fill_template,
    unique_name,
)

__all__ = ["MACROS", "parse_crontab"]

MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_NAME_RE = re.compile(r"\s+#\s*name:\s*(\S+)\s*$")
_NOTED_VARS = {
    "MAILTO": "cron mails a job's output to MAILTO; the platform keeps output in the run "
    "history and alerts through alert channels instead",
    "SHELL": "cron runs commands with SHELL; platform targets are not shell lines",
    "PATH": "cron's PATH for commands; a managed command's argv[0] is an absolute path",
}
TEMPLATE_REQUIRED = (
    "--target-template is required for crontab lines: the platform runs no shell lines "
    '(a "command" target names a command an operator registered, with typed args), '
    'so say what each line should call, e.g. \'{"type": "command", "command": "legacy-cron", '
    '"args": {"line": "{command}"}}\' or \'{"type": "http", "method": "POST", '
    '"url": "https://jobs.internal/run/{name}"}\''
)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _split_stdin(command: str) -> tuple[str, bool]:
    """The command with `\\%` unescaped, and whether an unescaped `%` remains (stdin)."""
    out, i, stdin = [], 0, False
    while i < len(command):
        c = command[i]
        if c == "\\" and i + 1 < len(command) and command[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if c == "%":
            stdin = True
        out.append(c)
        i += 1
    return "".join(out), stdin


def parse_crontab(
    text: str,
    *,
    source: str,
    timezone: str,
    template: dict[str, Any] | None,
    system: bool = False,
    taken: set[str] | None = None,
) -> ImportResult:
    """Definitions for the crontab's job lines; Problems for everything else.

    `timezone` is the zone before any CRON_TZ line; `taken` the names already in
    use (several files in one import), extended with the names given here.
    """
    if template is None:
        raise TemplateError(TEMPLATE_REQUIRED)
    result = ImportResult()
    names = taken if taken is not None else set()
    zone = timezone
    fields_before_command = 6 if system else 5

    def problem(lineno: int, line: str, reason: str) -> None:
        result.problems.append(Problem(source, lineno, line, reason))

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # blank or a comment: not a job
        env = _ENV_RE.match(line)
        if env and not line.startswith("@"):
            key, value = env.group(1), _unquote(env.group(2))
            if key in ("CRON_TZ", "TZ"):
                reason = cron_problem("* * * * *", value)
                if reason:
                    problem(lineno, raw, f"{key}: {reason}; the following lines keep {zone}")
                else:
                    zone = value
                    if key == "TZ":
                        # cronie takes TZ as CRON_TZ when that is unset; so do we,
                        # but the commands' own environment is not set by the platform.
                        problem(
                            lineno,
                            raw,
                            f"TZ={value} used as the schedule zone of "
                            "the following lines (as cronie does); it is not set in "
                            "the job's environment",
                        )
            elif key in _NOTED_VARS:
                problem(lineno, raw, f"{key} has no equivalent: {_NOTED_VARS[key]}")
            else:
                problem(
                    lineno,
                    raw,
                    f"environment variable {key} is not passed to targets "
                    "(put it in the target template, or a secret reference for credentials)",
                )
            continue

        if line.endswith("\\"):
            problem(
                lineno,
                raw,
                "cron has no line continuation: the backslash is part of "
                "this line's command and the next line is a separate entry",
            )

        parts = line.split(None, fields_before_command)
        if parts[0].startswith("@"):
            macro = parts[0].lower()
            parts = line.split(None, 2 if system else 1)
            if macro == "@reboot":
                problem(
                    lineno,
                    raw,
                    "@reboot is not supported: schedules fire on time, not when a machine starts",
                )
                continue
            if macro not in MACROS:
                problem(lineno, raw, f"unknown macro {parts[0]}")
                continue
            expr, rest = macro, parts[1:]
        else:
            expr, rest = " ".join(parts[:5]), parts[5:]
            if len(parts) < fields_before_command + 1:
                want = (
                    "5 time fields, a user and a command"
                    if system
                    else "5 time fields and a command"
                )
                problem(lineno, raw, f"not a crontab entry: expected {want}")
                continue
        user = None
        if system:
            if len(rest) < 2:
                problem(lineno, raw, "not a system crontab entry: expected a user and a command")
                continue
            user, command = rest[0], rest[1]
        else:
            if not rest:
                problem(lineno, raw, "not a crontab entry: no command")
                continue
            command = rest[0]
        reason = cron_problem(expr, zone)
        if reason:
            problem(lineno, raw, reason)
            continue

        given = _NAME_RE.search(command)
        if given:
            command = command[: given.start()].rstrip()
        command, stdin = _split_stdin(command)
        if stdin:
            problem(
                lineno,
                raw,
                "'%' in a cron command ends the command and feeds the rest "
                "to its stdin; a target has no stdin: escape it as \\% if it is literal",
            )
            continue
        if user is not None:
            problem(
                lineno,
                raw,
                f"runs as user {user!r} in cron; the platform has no users (imported without it)",
            )
        name = unique_name(given.group(1) if given else command_name(command), names)
        result.definitions.append(
            {
                "name": name,
                "cron": expr,
                "timezone": zone,
                "target": fill_template(template, {"command": command, "name": name}),
            }
        )
    return result
