"""Managed commands, the run time: operator-registered argv templates (no shell), run
by workers inside a bubblewrap sandbox.

`run` re-checks the schedule against the registration as it is now, builds the
environment and the sandbox, and runs the command without a shell, as an
unprivileged uid in a bwrap sandbox (read-only system directories, only the
declared paths writable, a private /tmp, no network, its own pid namespace,
rlimits), with an allow-listed environment, bounded output (secret values redacted)
and the attempt's deadline: exit 0 is success, anything else a retryable failure.

What may be registered and saved is `command_spec.py` (its `clean` and `rate_key`
are re-exported here: this module is the "command" entry of `dispatch.targets.KINDS`);
the sandbox and its egress proxy are `sandbox.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from datetime import UTC
from typing import Any

from django.conf import settings

from config import telemetry
from dispatch import logs
from dispatch.targets.command_spec import (
    RESERVED_ENV,
    Placeholder,
    clean,
    parse_template,
    rate_key,
    render,
)
from dispatch.targets.runtime import Aborted, Outcome, RunContext
from dispatch.targets.sandbox import (
    BASE_ENV,
    EGRESS_PORT,
    PROXY_ENV,
    EgressProxy,
    SandboxUnavailable,
    egress_policy,
    limits_prefix,
    probe_sandbox,
    read_info,
    sandbox_prefix,
    spawn_kwargs,
)

__all__ = ["clean", "rate_key", "run"]

log = logging.getLogger("dispatch.targets.command")

KILL_GRACE_S = 2.0


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
            "SCHED_RUN": str(ctx.run),
            "SCHED_FENCING_TOKEN": str(ctx.fencing_token),
        }
    )
    for name, ref in (cfg.get("env") or {}).items():
        env[name] = ctx.secret(ref["secret"])
    token = ctx.identity_token()
    if token is not None:
        env["SCHED_IDENTITY_TOKEN"] = token
    # The command joins the execution's trace: TRACEPARENT / TRACESTATE, the
    # environment names OpenTelemetry's propagators read for processes.
    env.update({name.upper(): value for name, value in telemetry.inject({}).items()})

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
            probe_sandbox(prefix)
            spawn = spawn_kwargs()
            if registered.egress:
                allow = egress_policy(ctx.tenant_id)
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

    # Its output is also the attempt's live log, line by line, as it is printed.
    live = ctx.live_log()
    reader = threading.Thread(
        target=_drain, args=(proc, capture, live), name="command-output", daemon=True
    )
    reader.start()
    ctx.on_abort(kill_group)
    proxy: EgressProxy | None = None
    if fds:
        try:
            proxy = EgressProxy.inside(read_info(info_r, ctx.remaining()), allow)
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


def _drain(proc: subprocess.Popen[bytes], capture: Any, live: logs.LineWriter) -> None:
    if proc.stdout is None:
        return
    fd = proc.stdout.fileno()
    with proc.stdout:
        while True:
            chunk = os.read(fd, 64 * 1024)
            if not chunk:
                live.close()
                return
            capture.feed(chunk)
            live.feed(chunk)


def _check_inside(placeholder: Placeholder, value: str) -> None:
    # The text is already a clean relative path; a symbolic link below the base
    # could still lead out of it, so the resolved path must stay inside too.
    base = os.path.realpath(placeholder.arg)
    real = os.path.realpath(os.path.join(placeholder.arg, value))
    if real != base and not real.startswith(base + "/"):
        raise ValueError(f"{placeholder.name}: resolves outside {placeholder.arg}")
