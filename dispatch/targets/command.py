"""Managed commands: operator-registered argv templates (no shell), run by workers
inside a bubblewrap sandbox.

Registration (`ManagedCommand`, edited by operators in the admin): `argv` is a list
of strings whose typed placeholders say what a tenant value may be:

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
again at run time against the registration as it is then.

At run time (`run`) the command runs without a shell, as an unprivileged uid in a
bwrap sandbox (read-only system directories, only the declared paths writable, a
private /tmp, no network, its own pid namespace, rlimits), with an allow-listed
environment, bounded output (secret values redacted) and the attempt's deadline:
exit 0 is success, anything else a retryable failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_secret_ref, clean_str, clean_timeout, require_keys
from dispatch.targets.runtime import Aborted, Outcome, RunContext
from tenants.models import Tenant

log = logging.getLogger("dispatch.targets.command")

KEYS = {"type", "command", "args", "env", "timeout_s"}
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# Names an operator may not declare as tenant-settable: set by the platform, or
# able to change what the command (or its interpreter, loader, libc) loads or runs.
# The environment is an allow-list; this is the second line behind it.
RESERVED_ENV = re.compile(
    r"^(PATH|HOME|LANG|LANGUAGE|LC_.*|TZ|TZDIR|LD_.*|GCONV_PATH|LOCPATH|NLSPATH|MALLOC_.*"
    r"|GLIBC_.*|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|TMPDIR|SCHED_.*|IFS|SHELL|ENV|BASH_ENV"
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
                not os.path.isabs(path)
                or os.path.normpath(path) != path
                or path in ("/", SANDBOX_TMP)
                or path.split("/")[1] in ("proc", "dev", "sys")
            ):
                errors[field] = (
                    f"{path!r}: must be an absolute, normalised directory other than "
                    "/ and /tmp, outside /proc, /dev and /sys (the sandbox has its own)"
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
    return cleaned


# --- Execution (workers) ---------------------------------------------------

# The sandbox's own tmpfs, never the host's /tmp.
SANDBOX_TMP = "/tmp"  # noqa: S108
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "HOME": SANDBOX_TMP,
}
KILL_GRACE_S = 2.0
NOFILE = 1024
# System directories the sandbox sees read-only (if the host has them); everything
# else of the host — the worker's code, data, secrets, home — is absent.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_sandbox_ok: set[tuple[str, ...]] = set()


class SandboxUnavailable(Exception):
    pass


def rate_key(config: dict[str, Any]) -> str | None:
    return None


def sandbox_prefix(registered: Any) -> list[str]:
    """bwrap argv (ending in `--`) for one run of `registered`; SandboxUnavailable if missing."""
    tool = settings.COMMAND_SANDBOX_BWRAP
    bwrap = shutil.which(tool)
    if bwrap is None:
        raise SandboxUnavailable(
            f"managed commands run in the bubblewrap sandbox, and {tool!r} is not installed "
            "on this worker (Debian: apt-get install bubblewrap); refusing to run unsandboxed"
        )
    prefix = [
        bwrap,
        "--unshare-all",  # user, pid, net (loopback only), ipc, uts, cgroup namespaces
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(settings.COMMAND_SANDBOX_UID),
        "--gid",
        str(settings.COMMAND_SANDBOX_GID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            prefix += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            prefix += ["--ro-bind", path, path]
    prefix += ["--dev", "/dev", "--proc", "/proc"]
    prefix += ["--size", str(settings.COMMAND_SANDBOX_TMP_MB << 20), "--tmpfs", SANDBOX_TMP]
    for path in registered.readable_paths or []:
        prefix += ["--ro-bind", path, path]
    for path in registered.writable_paths or []:
        prefix += ["--bind", path, path]
    prefix += ["--chdir", SANDBOX_TMP, "--"]
    return prefix


def limits_prefix(registered: Any, *, per_sandbox_nproc: bool) -> list[str]:
    """prlimit argv: hard limits the command cannot raise.

    RLIMIT_NPROC counts processes per uid *per user namespace*: applied inside the
    sandbox's fresh namespace it bounds this run alone, though every run shares
    uid 65534 (outside a sandbox it would count all of the uid's processes).
    """
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is not installed on this worker")
    memory = registered.memory_mb << 20
    out = [
        os.path.realpath(prlimit),
        f"--cpu={registered.cpu_s}",
        f"--as={memory}",
        f"--fsize={memory}",
        f"--nofile={NOFILE}",
        "--core=0",
    ]
    if per_sandbox_nproc:
        out.append(f"--nproc={registered.max_procs}")
    return [*out, "--"]


def _spawn_kwargs() -> dict[str, Any]:
    # As root, drop to the sandbox uid *before* bwrap: a root bwrap's user
    # namespace would map the command's uid to real root on every bound file.
    if os.geteuid() == 0:
        return {
            "user": settings.COMMAND_SANDBOX_UID,
            "group": settings.COMMAND_SANDBOX_GID,
            "extra_groups": [],
        }
    return {}


def _probe(prefix: list[str]) -> None:
    """Run `true` in the sandbox once per worker process, so a kernel that refuses
    namespaces fails with bwrap's own words instead of as the command's exit 1."""
    key = tuple(prefix)
    if key in _sandbox_ok:
        return
    try:
        res = subprocess.run(  # noqa: S603 - fixed argv
            [*prefix, "/bin/true"],
            env=dict(BASE_ENV),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=15,
            **_spawn_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"the bubblewrap sandbox cannot start here: {exc}") from None
    if res.returncode != 0:
        why = res.stderr.decode(errors="replace").strip()[-300:] or f"exit {res.returncode}"
        raise SandboxUnavailable(f"the bubblewrap sandbox cannot start here: {why}")
    _sandbox_ok.add(key)


def run(ctx: RunContext) -> Outcome:
    """Run the registered command once in the sandbox, killed with its group at the deadline."""
    from dispatch.models import ManagedCommand

    cfg = ctx.target
    registered = ManagedCommand.objects.filter(name=cfg["command"], enabled=True).first()
    # Re-checked at run time: an operator may have disabled or narrowed it since.
    if registered is None or (
        registered.tenants.exists() and not registered.tenants.filter(pk=ctx.tenant_id).exists()
    ):
        return Outcome.failure(
            f"managed command {cfg['command']!r} is not (or no longer) registered for this tenant",
            retryable=False,
            reason_code="command_unavailable",
        )
    # The schedule's values against the registration as it is now.
    try:
        placeholders = parse_template(registered.argv)
        args = cfg.get("args") or {}
        argv = render(registered.argv, placeholders, args)
        for placeholder in placeholders.values():
            if placeholder.kind == "path-under":
                _check_inside(placeholder, str(args[placeholder.name]))
        declared = set(registered.env or [])
        undeclared = sorted(
            n for n in cfg.get("env") or {} if n not in declared or RESERVED_ENV.match(n)
        )
        if undeclared:
            raise ValueError(f"env.{undeclared[0]}: is not a variable this command declares")
    except ValueError as exc:
        return Outcome.failure(
            f"the schedule's args do not fit the command's registration: {exc}",
            retryable=False,
            reason_code="bad_args",
        )
    env = dict(BASE_ENV)
    env.update(
        {
            "SCHED_EXECUTION_ID": ctx.execution_id,
            "SCHED_SCHEDULED_FOR": ctx.scheduled_for.astimezone(UTC).isoformat(),
            "SCHED_ATTEMPT": str(ctx.attempt),
            "SCHED_FENCING_TOKEN": str(ctx.fencing_token),
        }
    )
    for name, ref in (cfg.get("env") or {}).items():
        env[name] = ctx.secret(ref["secret"])

    sandboxed = settings.COMMAND_SANDBOX == "bwrap"
    try:
        for path in [*(registered.readable_paths or []), *(registered.writable_paths or [])]:
            if not os.path.isdir(path):
                raise SandboxUnavailable(
                    f"{path} (declared by the registration) is not a directory on this worker"
                )
        fds: tuple[int, ...] = ()
        info_r = block_w = -1
        allow: Any = None
        if sandboxed:
            prefix = sandbox_prefix(registered)
            _probe(prefix)
            spawn = _spawn_kwargs()
            if registered.egress:
                allow = _egress_policy(ctx.tenant_id)
                # bwrap reports the sandbox's pid on info_w and waits on block_r
                # before it runs the command, while the proxy is put in place.
                block_r, block_w = os.pipe()
                info_r, info_w = os.pipe()
                fds = (block_r, info_w)
                prefix[-1:] = ["--info-fd", str(info_w), "--block-fd", str(block_r), "--"]
                env.update({k: f"http://127.0.0.1:{EGRESS_PORT}" for k in PROXY_ENV})
        else:
            log.warning("COMMAND_SANDBOX=none: running %s unsandboxed", registered.name)
            prefix, spawn = [], {}
        prefix += limits_prefix(registered, per_sandbox_nproc=sandboxed)
    except SandboxUnavailable as exc:
        return Outcome.failure(str(exc), retryable=False, reason_code="sandbox_unavailable")

    capture = ctx.capture(keep_tail=True)
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv from an operator-registered template, no shell
            [*prefix, *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=fds,
            cwd="/",
            **spawn,
        )
    except OSError as exc:
        if fds:
            os.close(info_r)
            os.close(block_w)
        return Outcome.failure(
            ctx.redact(f"cannot start {argv[0]}: {exc}"),
            retryable=True,
            reason_code="spawn_failed",
        )
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def kill_group() -> None:
        # The whole group: a command's own children die with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    reader = threading.Thread(
        target=_drain, args=(proc, capture), name="command-output", daemon=True
    )
    reader.start()
    ctx.on_abort(kill_group)
    proxy: EgressProxy | None = None
    if fds:
        try:
            proxy = EgressProxy.inside(_read_info(info_r, ctx.remaining()), allow)
            os.write(block_w, b"go")
        except (OSError, ValueError) as exc:
            kill_group()
            reader.join(KILL_GRACE_S)
            return Outcome.failure(
                f"cannot set up the command's egress proxy: {exc}",
                retryable=True,
                reason_code="sandbox_unavailable",
                excerpt=capture.text(ctx.redact_bytes),
            )
        finally:
            os.close(info_r)
            os.close(block_w)
    try:
        code = proc.wait()
    finally:
        if proxy is not None:
            proxy.close()
    reader.join(KILL_GRACE_S)
    excerpt = capture.text(ctx.redact_bytes)
    if ctx.aborted:
        if ctx.abort_reason != "deadline":
            raise Aborted(ctx.abort_reason)
        return Outcome.failure(
            f"killed at its {ctx.timeout_s:g} s timeout",
            retryable=True,
            reason_code="timeout",
            excerpt=excerpt,
            latency_ms=ctx.elapsed_ms(),
        )
    if code == 0:
        return Outcome.success(exit_code=0, excerpt=excerpt, latency_ms=ctx.elapsed_ms())
    why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return Outcome.failure(
        why,
        retryable=True,
        reason_code=f"exit_{code}",
        exit_code=code,
        excerpt=excerpt,
        latency_ms=ctx.elapsed_ms(),
    )


def _drain(proc: subprocess.Popen[bytes], capture: Any) -> None:
    if proc.stdout is None:
        return
    fd = proc.stdout.fileno()
    with proc.stdout:
        while True:
            chunk = os.read(fd, 64 * 1024)
            if not chunk:
                return
            capture.feed(chunk)


def _check_inside(placeholder: Placeholder, value: str) -> None:
    # The text is already a clean relative path; a symbolic link below the base
    # could still lead out of it, so the resolved path must stay inside too.
    base = os.path.realpath(placeholder.arg)
    real = os.path.realpath(os.path.join(placeholder.arg, value))
    if real != base and not real.startswith(base + "/"):
        raise ValueError(f"{placeholder.name}: resolves outside {placeholder.arg}")


# --- Egress (registrations with egress=True) --------------------------------
# The sandbox keeps its own network namespace with only loopback; the worker
# opens a listening socket *inside* that namespace (setns from a short-lived
# thread) and serves it as an HTTP proxy from its own network: every CONNECT or
# http:// request goes through the tenant's egress policy and the SSRF guard,
# exactly like an http target, and to the checked address only.

EGRESS_PORT = 3128
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
CLONE_NEWNET = 0x40000000
MAX_HEAD = 16 * 1024
MAX_EGRESS_CONNECTIONS = 32


def _egress_policy(tenant_id: Any) -> Any:
    from dispatch.targets import netguard

    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "egress for managed commands needs a root worker (it opens the proxy inside "
            "the sandbox's network namespace)"
        )
    return netguard.AllowList.parse(Tenant.objects.get(pk=tenant_id).egress_allow or [])


def _read_info(fd: int, timeout: float) -> int:
    """The sandbox's pid from bwrap's --info-fd JSON (EOF when bwrap is done writing)."""
    import json
    import select

    data = b""
    deadline = time.monotonic() + max(1.0, min(timeout, 30.0))
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ValueError("bwrap did not report the sandbox in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    if not data:
        raise ValueError("bwrap exited before the sandbox started")
    return int(json.loads(data)["child-pid"])


class EgressProxy:
    """An HTTP(S) proxy on 127.0.0.1:3128 of one sandbox, connecting out under `allow`."""

    def __init__(self, listener: socket.socket, allow: Any) -> None:
        self.listener = listener
        self.allow = allow
        self.closed = threading.Event()
        self.sockets: set[socket.socket] = {listener}
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, name="egress-proxy", daemon=True).start()

    @classmethod
    def inside(cls, pid: int, allow: Any) -> EgressProxy:
        import ctypes

        result: dict[str, Any] = {}

        def enter() -> None:
            # setns changes only this thread, which ends right after; the socket
            # stays in the sandbox's namespace.
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the sandbox's network")
                finally:
                    os.close(fd)
                result["sock"] = socket.create_server(("127.0.0.1", EGRESS_PORT), backlog=32)
            except OSError as exc:
                result["error"] = exc

        thread = threading.Thread(target=enter, name="egress-setns")
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return cls(result["sock"], allow)

    def close(self) -> None:
        self.closed.set()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self.sockets.clear()

    def _track(self, sock: socket.socket) -> bool:
        with self.lock:
            # Each connection is a worker thread: a command gets a bounded number.
            if self.closed.is_set() or len(self.sockets) > 2 * MAX_EGRESS_CONNECTIONS:
                sock.close()
                return False
            self.sockets.add(sock)
            return True

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self._track(conn):
                threading.Thread(
                    target=self._handle, args=(conn,), name="egress-conn", daemon=True
                ).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk or len(head) > MAX_HEAD:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = [*lines[0].split(" "), "", "", ""][:3]
            if method == "CONNECT":
                host, _, port_text = target.rpartition(":")
                host = host.strip("[]")
                upstream_head = b""
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    self._refuse(conn, 400, "only CONNECT and http:// requests")
                    return
                host, port_text = url.hostname, str(url.port or 80)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                kept = [
                    line
                    for line in lines[1:]
                    if not line.lower().startswith(("proxy-", "connection:"))
                ]
                upstream_head = (
                    "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close"])
                    + "\r\n\r\n"
                ).encode("latin-1")
            if not port_text.isdigit() or not host:
                self._refuse(conn, 400, "bad proxy target")
                return
            upstream = self._connect(conn, host, int(port_text))
            if upstream is None:
                return
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.sendall(upstream_head + rest)
            self._pipe(conn, upstream)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _connect(self, conn: socket.socket, host: str, port: int) -> socket.socket | None:
        from dispatch.targets import netguard
        from dispatch.targets.http import resolve_checked

        try:
            addresses = resolve_checked(host, port, allow=self.allow, timeout=5)
        except netguard.Denied as denied:
            self._refuse(conn, 403, f"egress to {host}:{port} denied: {denied}")
            return None
        except OSError as exc:
            self._refuse(conn, 502, f"cannot resolve {host}: {exc}")
            return None
        for family, address in addresses:
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.settimeout(10)
            try:
                upstream.connect((address, port))
            except OSError:
                upstream.close()
                continue
            if self._track(upstream):
                return upstream
            return None
        self._refuse(conn, 502, f"cannot connect to {host}:{port}")
        return None

    def _refuse(self, conn: socket.socket, status: int, why: str) -> None:
        body = (why + "\n").encode()
        conn.sendall(
            f"HTTP/1.1 {status} Refused\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        import selectors

        a.settimeout(None)
        b.settimeout(None)
        with selectors.DefaultSelector() as sel:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while not self.closed.is_set():
                for key, _ in sel.select(timeout=1):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(64 * 1024)
                    if not data:
                        return
                    key.data.sendall(data)
