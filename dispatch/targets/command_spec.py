"""Managed commands, the definition side: what an operator may register and what a
tenant may put in a schedule, checked without running anything. The web process
(schedule saves, `ManagedCommand.clean` in the admin and the console) needs only
this; running a command is `command.py`, its sandbox `sandbox.py`.

Registration (`ManagedCommand`, by platform staff in the console or the admin):
`argv` is a list of strings whose typed placeholders say what a tenant value may be:

    {name} / {name:str}          plain text, one argv element: no leading "-", no "/",
                                 "\\", ".." or control characters
    {n:int}                      a whole number 0..10^18
    {day:date}                   YYYY-MM-DD
    {when:datetime}              ISO 8601 with an offset, passed as UTC "...Z"
    {mode:choice:full|delta}     one of the listed words
    {file:path-under:/srv/x}     a relative path below /srv/x (which must be one of
                                 the registration's readable or writable paths);
                                 the command receives the absolute path

plus `env` (the variable names a schedule may set, to secret references),
`readable_paths` / `writable_paths` (host directories bound into the sandbox) and
limits (`cpu_s`, `memory_mb`, `max_procs`).

Definition: {"type": "command", "command": "<registered name>", "args": {"param": "value"},
"env": {"NAME": {"secret": "vault:kv/<tenant>/path#key"}}}. Values are checked
against the placeholder types when the schedule is saved (400 naming the field) and
again at run time (`command.run`) against the registration as it is then.
"""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import (
    clean_auth,
    clean_secret_ref,
    clean_str,
    clean_timeout,
    require_keys,
)
from dispatch.targets.sandbox import SANDBOX_TMP
from tenants.models import Tenant

KEYS = {"type", "command", "args", "env", "timeout_s", "auth"}
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# Names an operator may not declare as tenant-settable: set by the platform, or
# able to change what the command (or its interpreter, loader, libc) loads or runs.
# The environment is an allow-list; this is the second line behind it.
RESERVED_ENV = re.compile(
    r"^(PATH|HOME|LANG|LANGUAGE|LC_.*|TZ|TZDIR|LD_.*|GCONV_PATH|LOCPATH|NLSPATH|MALLOC_.*"
    r"|GLIBC_.*|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|TMPDIR|SCHED_.*|TRACEPARENT|TRACESTATE"
    r"|IFS|SHELL|ENV|BASH_ENV"
    r"|BASH_FUNC_.*|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|CDPATH|PYTHON.*|PERL.*|RUBY.*"
    r"|GEM_.*|NODE_.*|NPM_.*|JAVA_.*|_JAVA_OPTIONS|JDK_.*|CLASSPATH|GIT_.*|SSH_.*|LUA_.*"
    r"|TCL.*|PHP.*|R_LIBS.*|R_PROFILE.*|R_ENVIRON.*|DOTNET_.*|CORECLR_.*|COMPLUS_.*|GOFLAGS"
    r"|GOROOT|GOPATH|GOENV|GODEBUG|GOTOOLCHAIN|CARGO_.*|RUSTC.*|RUSTFLAGS|.*_OPTIONS"
    r"|.*_OPTS|.*PROXY|.*_PRELOAD|.*_LIBRARY_PATH|.*_PATH"
    # Libraries and tools that load code or configuration named by a variable.
    r"|OPENSSL_.*|SSL_CERT_.*|LESSOPEN|LESSCLOSE|LESSKEY.*|KRB5.*|TERMINFO.*|XDG_.*"
    r"|EDITOR|VISUAL|PAGER|MANPAGER|CURL_HOME|WGETRC|INPUTRC)$",
    re.IGNORECASE,
)
PARAM_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
STR_VALUE = re.compile(r"^[^\x00-\x1f\x7f/\\]{0,256}$")
INT_VALUE = re.compile(r"^[0-9]{1,18}$")
DATE_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
CHOICE_WORD = re.compile(r"^[A-Za-z0-9_.+=@:,][A-Za-z0-9_.+=@:,-]{0,63}$")
PATH_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=@,-]{0,127}$")
MAX_PATH_VALUE = 1024


@dataclass(frozen=True)
class Placeholder:
    """`{name:kind[:arg]}` in an argv template."""

    name: str
    kind: str  # str | int | date | datetime | choice | path-under
    arg: str = ""

    def describe(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


def parse_template(argv: Any) -> dict[str, Placeholder]:
    """The placeholders of an argv template; ValueError (with the reason) if it is not one.

    argv[0] is the program: an absolute path with no placeholder, so a tenant can
    never choose what runs. Only named, typed placeholders are understood: no
    positional fields, attribute/index access or conversions (str.format's
    mini-language would let a template reach into objects).
    """
    if not isinstance(argv, list) or not argv or not all(isinstance(p, str) for p in argv):
        raise ValueError("must be a non-empty list of strings")
    if len(argv) > 64:
        raise ValueError("at most 64 elements")
    found: dict[str, Placeholder] = {}
    for index, part in enumerate(argv):
        if "\x00" in part:
            # No program takes one (argv is C strings), and PostgreSQL cannot store it.
            raise ValueError(f"element {index}: must not contain a NUL character")
        try:
            pieces = list(string.Formatter().parse(part))
        except ValueError as exc:
            raise ValueError(
                f"element {index}: {exc} (write a literal brace as {{{{ or }}}})"
            ) from None
        for _, field, spec, conversion in pieces:
            if field is None:
                continue
            if index == 0:
                raise ValueError("argv[0] is the program and may not contain a placeholder")
            if not PARAM_NAME.match(field) or conversion:
                raise ValueError(
                    f"element {index}: placeholder {{{field}}} must be {{name}} or "
                    "{name:type} with a lower-case name"
                )
            placeholder = _placeholder(field, spec or "str")
            if found.get(field, placeholder) != placeholder:
                raise ValueError(f"placeholder {field!r} is used with two different types")
            found[field] = placeholder
    if not os.path.isabs(argv[0]) or os.path.normpath(argv[0]) != argv[0]:
        raise ValueError("argv[0] must be the program's absolute, normalised path")
    return found


def _placeholder(name: str, spec: str) -> Placeholder:
    kind, _, arg = spec.partition(":")
    if kind in ("str", "int", "date", "datetime") and not arg:
        return Placeholder(name, kind)
    if kind == "choice" and arg:
        words = arg.split("|")
        if all(CHOICE_WORD.match(w) for w in words):
            return Placeholder(name, kind, arg)
        raise ValueError(f"{{{name}:choice:...}}: words of letters, digits and _.+=@:,- only")
    if kind == "path-under" and arg:
        if not os.path.isabs(arg) or os.path.normpath(arg) != arg or arg == "/":
            raise ValueError(
                f"{{{name}:path-under:...}}: the base must be an absolute, normalised "
                "directory other than /"
            )
        return Placeholder(name, kind, arg)
    raise ValueError(
        f"placeholder {{{name}:{spec}}}: the type must be str, int, date, datetime, "
        "choice:a|b|... or path-under:/directory"
    )


def check_value(placeholder: Placeholder, value: Any) -> str:
    """The argv text for a tenant value; ValueError (saying what is allowed) if it is not one."""
    kind = placeholder.kind
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            value = str(value)
        if not isinstance(value, str) or not INT_VALUE.match(value):
            raise ValueError("must be a whole number 0..999999999999999999")
        return str(int(value))
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if kind == "str":
        if not STR_VALUE.match(value) or value.startswith("-") or ".." in value:
            raise ValueError(
                "must be plain text of at most 256 characters: not starting with '-', "
                "without '/', '\\', '..' or control characters"
            )
        return value
    if kind == "date":
        try:
            if not DATE_VALUE.match(value):
                raise ValueError
            return date.fromisoformat(value).isoformat()
        except ValueError:
            raise ValueError("must be a date, YYYY-MM-DD") from None
    if kind == "datetime":
        try:
            if len(value) > 40 or not DATE_VALUE.match(value[:10]):
                raise ValueError
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("must be an ISO 8601 date-time with an offset") from None
        if parsed.tzinfo is None:
            raise ValueError("must carry an offset (e.g. Z or +02:00)")
        return parsed.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if kind == "choice":
        words = placeholder.arg.split("|")
        if value not in words:
            raise ValueError(f"must be one of {', '.join(words)}")
        return value
    if kind == "path-under":
        segments = value.split("/")
        if len(value) > MAX_PATH_VALUE or not all(PATH_SEGMENT.match(s) for s in segments):
            raise ValueError(
                f"must be a relative path below {placeholder.arg}: segments of letters, "
                "digits and _.+=@,- not starting with '.' or '-'"
            )
        return f"{placeholder.arg}/{value}"
    raise ValueError(f"unknown placeholder type {kind!r}")  # parse_template forbids it


def render(
    argv: list[str], placeholders: dict[str, Placeholder], args: dict[str, Any]
) -> list[str]:
    """argv with each placeholder replaced by its checked value (ValueError naming the arg)."""
    values: dict[str, str] = {}
    for name, placeholder in placeholders.items():
        if name not in args:
            raise ValueError(f"{name}: is required by this command")
        try:
            values[name] = check_value(placeholder, args[name])
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    extra = sorted(set(args) - set(placeholders))
    if extra:
        raise ValueError(f"{extra[0]}: is not a parameter of this command")
    out = []
    for part in argv:
        pieces = []
        for literal, field, _, _ in string.Formatter().parse(part):
            pieces.append(literal)
            if field is not None:
                pieces.append(values[field])
        out.append("".join(pieces))
    return out


def check_registration(
    argv: Any, env: Any, readable_paths: Any, writable_paths: Any
) -> dict[str, str]:
    """Problems of a registration, as {field: reason} (empty when it is valid)."""
    errors: dict[str, str] = {}
    paths: list[str] = []
    for field, value in (("readable_paths", readable_paths), ("writable_paths", writable_paths)):
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            errors[field] = "must be a list of absolute directory paths"
            continue
        for path in value:
            if (
                "\x00" in path
                or not os.path.isabs(path)
                or os.path.normpath(path) != path
                or path in ("/", SANDBOX_TMP)
                or path.split("/")[1] in ("proc", "dev", "sys")
            ):
                errors[field] = (
                    f"{path!r}: must be an absolute, normalised directory (no '..', no NUL) "
                    "other than / and /tmp, outside /proc, /dev and /sys (the sandbox has its own)"
                )
            paths.append(path)
    try:
        placeholders = parse_template(argv)
    except ValueError as exc:
        errors["argv"] = str(exc)
        placeholders = {}
    for p in placeholders.values():
        if p.kind == "path-under" and not any(
            p.arg == base or p.arg.startswith(base + "/") for base in paths
        ):
            errors["argv"] = (
                f"{{{p.name}:path-under:{p.arg}}}: {p.arg} must be inside one of the "
                "readable or writable paths, or the command cannot see it"
            )
    if not isinstance(env, list) or not all(isinstance(n, str) for n in env):
        errors["env"] = "must be a list of variable names"
    else:
        for name in env:
            if not ENV_NAME.match(name) or RESERVED_ENV.match(name):
                errors["env"] = (
                    f"{name!r}: must be an upper-case name the platform does not set and "
                    "that does not steer a loader, shell or interpreter"
                )
    return errors


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    from dispatch.models import ManagedCommand

    require_keys(config, allowed=KEYS)
    name = clean_str(config, "command", required=True, max_len=100)
    registered = ManagedCommand.objects.filter(name=name, enabled=True).first()
    if registered is None or not registered.allowed_for(tenant):
        raise InvalidSchedule.field(
            "target.command", f"no managed command {name!r} is registered for this tenant"
        )
    args = config.get("args", {})
    if not isinstance(args, dict):
        raise InvalidSchedule.field("target.args", "must be an object of parameter to value")
    try:
        placeholders = parse_template(registered.argv)
    except ValueError as exc:
        raise InvalidSchedule.field(
            "target.command", f"the registration of {name!r} is invalid ({exc}); ask an operator"
        ) from None
    cleaned_args: dict[str, str] = {}
    for key, value in args.items():
        if key not in placeholders:
            raise InvalidSchedule.field(f"target.args.{key}", "is not a parameter of this command")
        try:
            checked = check_value(placeholders[key], value)
        except ValueError as exc:
            raise InvalidSchedule.field(f"target.args.{key}", str(exc)) from None
        # Stored as the tenant wrote it (normalised); path-under keeps the relative part.
        cleaned_args[key] = value if placeholders[key].kind == "path-under" else checked
    missing = [p for p in placeholders if p not in args]
    if missing:
        raise InvalidSchedule.field(f"target.args.{missing[0]}", "is required by this command")
    timeout = clean_timeout(config, default=registered.timeout_s)
    if timeout > registered.timeout_s:
        raise InvalidSchedule.field(
            "target.timeout_s", f"this command allows at most {registered.timeout_s} s"
        )
    env_in = config.get("env", {})
    if not isinstance(env_in, dict) or len(env_in) > 32:
        raise InvalidSchedule.field("target.env", "must be an object of at most 32 variables")
    declared = set(registered.env or [])
    env: dict[str, Any] = {}
    for key, value in env_in.items():
        # An allow-list: only what the operator declared for this command.
        if key not in declared or RESERVED_ENV.match(key):
            allowed = ", ".join(sorted(declared)) or "none"
            raise InvalidSchedule.field(
                f"target.env.{key}",
                f"is not a variable this command declares (declared: {allowed})",
            )
        env[key] = clean_secret_ref(value, field=f"target.env.{key}", tenant=tenant)
    cleaned: dict[str, Any] = {
        "type": "command",
        "command": name,
        "args": cleaned_args,
        "timeout_s": timeout,
    }
    if env:
        cleaned["env"] = env
    auth = clean_auth(config, default_audience=None)
    if auth is not None:
        cleaned["auth"] = auth
    return cleaned


def rate_key(config: dict[str, Any]) -> str | None:
    return None
