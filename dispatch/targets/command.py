"""Managed commands: operator-registered argv templates (no shell), run by workers.

Definition: {"type": "command", "command": "<registered name>", "args": {"param": "value"},
"env": {"NAME": {"secret": "vault:kv/<tenant>/path#key"}}}.

At run time (`run`) the command runs without a shell in its own process group,
with a minimal environment (the attempt's ids and the resolved `env` secrets),
bounded output (secret values redacted) and the attempt's deadline: exit 0 is
success, anything else a retryable failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from datetime import UTC
from typing import Any

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_secret_ref, clean_str, clean_timeout, require_keys
from dispatch.targets.runtime import Aborted, Outcome, RunContext
from tenants.models import Tenant

KEYS = {"type", "command", "args", "env", "timeout_s"}
ARG_VALUE = re.compile(r"^[A-Za-z0-9_.,:=@+/-]{0,256}$")
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# Set by the platform, or able to change what the command loads or runs.
RESERVED_ENV = re.compile(
    r"^(PATH|HOME|LANG|LC_.*|LD_.*|PYTHON.*|SCHED_.*|IFS|SHELL|ENV|BASH_ENV)$"
)


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
    params = set(registered.parameters())
    for key, value in args.items():
        if key not in params:
            raise InvalidSchedule.field(f"target.args.{key}", "is not a parameter of this command")
        # Values are substituted into argv as single arguments (never a shell),
        # and still kept to a conservative alphabet.
        if not isinstance(value, str) or not ARG_VALUE.match(value):
            raise InvalidSchedule.field(
                f"target.args.{key}", "must be a short string of letters, digits and _.,:=@+/-"
            )
    missing = sorted(params - set(args))
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
    env: dict[str, Any] = {}
    for key, value in env_in.items():
        if not isinstance(key, str) or not ENV_NAME.match(key) or RESERVED_ENV.match(key):
            raise InvalidSchedule.field(
                f"target.env.{key}", "must be an upper-case name the platform does not set"
            )
        env[key] = clean_secret_ref(value, field=f"target.env.{key}", tenant=tenant)
    cleaned: dict[str, Any] = {
        "type": "command",
        "command": name,
        "args": args,
        "timeout_s": timeout,
    }
    if env:
        cleaned["env"] = env
    return cleaned


# --- Execution (workers) ---------------------------------------------------

BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
KILL_GRACE_S = 2.0


def rate_key(config: dict[str, Any]) -> str | None:
    return None


def run(ctx: RunContext) -> Outcome:
    """Run the registered command once, in its own process group, killed at the deadline."""
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
    try:
        argv = [str(part).format_map(cfg.get("args") or {}) for part in registered.argv]
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        return Outcome.failure(
            f"command template does not match the schedule's args: {exc}",
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

    capture = ctx.capture(keep_tail=True)
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv from an operator-registered template, no shell
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    except OSError as exc:
        return Outcome.failure(
            ctx.redact(f"cannot start {argv[0]}: {exc}"),
            retryable=True,
            reason_code="spawn_failed",
        )

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
    code = proc.wait()
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
