"""Managed commands in the bubblewrap sandbox, run by a real worker: escapes a tenant's
command might try (writing outside the declared paths, the platform's ports, fork
bombs, the worker's environment, outliving the deadline) and failing closed when the
sandbox is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from dispatch.models import Execution, ManagedCommand
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    ONE_SHOT,
    Pump,
    final,
    make_execution,
    make_schedule,
    pool_children,
    publish,
    run_to_end,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap (.ci/run installs it)"
    ),
]
CANARY = f"worker-canary-{uuid.uuid4().hex}"
SECRET = f"cmd-secret-{uuid.uuid4().hex[:12]}"
ROOT = os.geteuid() == 0
UID = settings.COMMAND_SANDBOX_UID


@pytest.fixture(scope="module")
def dirs() -> Iterator[dict[str, Path]]:
    """Host directories: one declared writable, one declared read-only, and one
    world-writable but undeclared (only the sandbox can keep a command out of it)."""
    base = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir="/tmp"))
    base.chmod(0o755)
    out = {name: base / name for name in ("writable", "readable", "open")}
    for path in out.values():
        path.mkdir()
    out["open"].chmod(0o777)
    (out["readable"] / "in.txt").write_text("operator data\n")
    if ROOT:
        os.chown(out["writable"], UID, settings.COMMAND_SANDBOX_GID)
    yield out
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def worker_settings(module_ledger: Ledger) -> dict[str, Any]:
    return {
        "concurrency": 2,
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
        "SECRETS_BACKEND": "env",
        "SCHED_SECRET_BILLING__CMD_TOKEN": SECRET,
        "WORKER_CANARY": CANARY,
    }


def register(script: str, *, interpreter: str = "/bin/sh", **fields: Any) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    ManagedCommand.objects.create(name=name, argv=[interpreter, "-c", script, name], **fields)
    return name


def run(
    principal: Principal,
    name: str,
    *,
    timeout_s: int = 15,
    queue: str = "default.short",
    **target: Any,
) -> Execution:
    return run_to_end(
        principal,
        {"type": "command", "command": name, "args": {}} | target,
        timeout_s=timeout_s,
        queue=queue,
        wait=timeout_s + 20,
    )


def test_command_writes_only_its_declared_paths_as_an_unprivileged_uid(
    worker: Proc, admin_principal: Principal, dirs: dict[str, Path]
) -> None:
    marker = f"host-marker-{uuid.uuid4().hex}"
    w, r, o = dirs["writable"], dirs["readable"], dirs["open"]
    script = f"""
        echo uid=$(id -u)
        echo ok > {w}/out.txt && echo wrote-writable
        echo x > {o}/escape.txt || echo open-refused
        echo x > {r}/in.txt || echo readable-refused
        cat {r}/in.txt
        echo x > /tmp/{marker} && echo wrote-private-tmp
        echo x > /etc/{marker} || echo etc-refused
        echo x > /usr/{marker} || echo usr-refused
        ls {Path.cwd()} >/dev/null 2>&1 || echo no-worktree
        ls {settings.DATA_DIR} >/dev/null 2>&1 || echo no-data-dir
        echo limits=$(ulimit -t),$(ulimit -v),$(ulimit -u)
    """
    name = register(
        script,
        interpreter="/bin/bash",
        readable_paths=[str(r)],
        writable_paths=[str(w)],
        cpu_s=7,
        memory_mb=300,
        max_procs=33,
    )
    execution = run(admin_principal, name)
    out = execution.log_excerpt
    assert execution.state == "succeeded", (execution.error, out)
    assert f"uid={UID}" in out
    for line in (
        "wrote-writable",
        "open-refused",
        "readable-refused",
        "operator data",
        "wrote-private-tmp",
        "etc-refused",
        "usr-refused",
        "no-worktree",
        "no-data-dir",
    ):
        assert line in out, out
    assert f"limits=7,{300 * 1024},33" in out
    assert (w / "out.txt").read_text() == "ok\n"
    if ROOT:  # the file on the host belongs to the sandbox uid, not to root
        assert (w / "out.txt").stat().st_uid == UID
    assert not (o / "escape.txt").exists()
    assert (r / "in.txt").read_text() == "operator data\n"
    host_tmp = Path(tempfile.gettempdir())
    assert not (host_tmp / marker).exists() and not Path("/etc", marker).exists()


def test_command_cannot_see_or_touch_the_worker(worker: Proc, admin_principal: Principal) -> None:
    children = set(pool_children(worker))
    # /proc/*/environ would show the worker's environment if its processes were
    # visible; the kill aims at the worker's own pool processes by their host pids
    # (never a broad kill: unsandboxed, as root, that would hit the whole machine).
    pids = " ".join(str(p) for p in sorted(children))
    script = (
        "env; echo ---; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; "
        f"echo procs=$(ls -d /proc/[0-9]* | wc -l); kill -9 {pids}; echo done"
    )
    name = register(script, env=["API_TOKEN"])
    execution = run(admin_principal, name, env={"API_TOKEN": {"secret": "env:CMD_TOKEN"}})
    out = execution.log_excerpt
    assert execution.state == "succeeded", (execution.error, out)
    assert CANARY not in out and SECRET not in out and "API_TOKEN=[redacted]" in out
    names = {line.split("=", 1)[0] for line in out.split("---")[0].splitlines() if "=" in line}
    allowed = {"PATH", "LANG", "TZ", "HOME", "API_TOKEN", "PWD", "SHLVL", "_"}
    assert names - allowed == {
        "SCHED_EXECUTION_ID",
        "SCHED_SCHEDULED_FOR",
        "SCHED_ATTEMPT",
        "SCHED_RUN",
        "SCHED_FENCING_TOKEN",
        # The attempt's trace context (its tracestate is empty, so not set).
        "TRACEPARENT",
    }, names
    assert "procs=" in out and int(out.split("procs=")[1].split()[0]) < 10
    assert worker.alive() and set(pool_children(worker)) == children


def platform_endpoints() -> tuple[set[int], set[str]]:
    """The platform's PostgreSQL/Redis/broker as loopback TCP ports (CI's servers)
    and unix sockets (the embedded servers)."""
    ports: set[int] = set()
    sockets: set[str] = set()
    db = settings.DATABASES["default"]
    if str(db["HOST"]).startswith("/"):
        sockets.add(f"{db['HOST']}/.s.PGSQL.{db['PORT'] or 5432}")
    elif db["HOST"] in ("127.0.0.1", "localhost", "::1"):
        ports.add(int(db["PORT"] or 5432))
    for url in (settings.CELERY_BROKER_URL, settings.REDIS_URL):
        parts = urlsplit(url)
        if parts.scheme in ("unix", "redis+socket"):
            sockets.add(parts.path)
        elif parts.hostname in ("127.0.0.1", "localhost", "::1"):
            ports.add(parts.port or {"amqp": 5672}.get(parts.scheme, 6379))
    return ports, sockets


def test_command_has_no_network_to_the_platform(worker: Proc, admin_principal: Principal) -> None:
    ports, sockets = platform_endpoints()
    # A listener of our own on the host's loopback stands for "a port on this
    # host" wherever the platform's servers listen on sockets only.
    listener = socket.create_server(("127.0.0.1", 0))
    ports.add(listener.getsockname()[1])
    try:
        for port in ports:  # live from here, so a refusal below is the sandbox's doing
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        for path in sockets:
            assert Path(path).is_socket(), path
        script = "; ".join(
            [
                f"(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>/dev/null && echo open-{p} || echo closed-{p}"
                for p in sorted(ports)
            ]
            + [f"[ -e {path} ] && echo open-{path} || echo closed-{path}" for path in sockets]
        )
        execution = run(admin_principal, register(script, interpreter="/bin/bash"))
    finally:
        listener.close()
    out = execution.log_excerpt
    assert execution.state == "succeeded", (execution.error, out)
    for endpoint in [*map(str, ports), *sockets]:
        assert f"closed-{endpoint}" in out and f"open-{endpoint}" not in out, out


@pytest.mark.skipif(not ROOT, reason="command egress needs a root worker")
def test_egress_goes_only_through_the_proxy_under_the_tenant_policy(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    # Allowed: the test receiver (TARGET_TEST_ALLOW). Not allowed: another loopback
    # port, standing for the platform's servers or anything else on the host.
    other = socket.create_server(("127.0.0.1", 0))
    other.setblocking(False)
    port = other.getsockname()[1]
    module_ledger.requests.clear()
    script = f"""
        curl -sS -m 5 {module_ledger.url}/plain && echo
        curl -sS -m 5 -p {module_ledger.url}/tunnel && echo
        curl -sS -m 5 http://127.0.0.1:{port}/ ; echo
        curl -sS -m 5 -p http://127.0.0.1:{port}/ ; echo
        (exec 3<>/dev/tcp/127.0.0.1/{module_ledger.port}) 2>/dev/null && echo direct-open || echo direct-closed
    """
    try:
        execution = run(admin_principal, register(script, interpreter="/bin/bash", egress=True))
        with pytest.raises(BlockingIOError):
            other.accept()
    finally:
        other.close()
    out = execution.log_excerpt
    assert execution.state == "succeeded", (execution.error, out)
    assert sorted(r["path"] for r in module_ledger.requests) == ["/plain", "/tunnel"], (
        module_ledger.dump()
    )
    assert f"egress to 127.0.0.1:{port} denied" in out, out  # plain HTTP: the proxy's 403 body
    assert "CONNECT tunnel failed, response 403" in out  # the tunnel: curl reports the status
    assert "direct-closed" in out
    # The plain-HTTP request reached the receiver in origin form, without proxy headers.
    plain = next(r for r in module_ledger.requests if r["path"] == "/plain")
    assert not any(h.lower().startswith("proxy-") for h in plain["headers"])


def count(marker: str) -> int:
    res = subprocess.run(["pgrep", "-c", "-f", marker], capture_output=True, text=True)
    return int(res.stdout.strip() or 0)


def test_fork_bomb_stays_within_its_process_limit_and_dies_at_the_deadline(
    worker: Proc, admin_principal: Principal
) -> None:
    name = register(
        # Only inside a pid namespace (a low $$): unsandboxed, nothing would bound it.
        "[ $$ -lt 10 ] || exit 99; sleep 30 & bomb() {{ bomb | bomb & }}; bomb; wait",
        interpreter="/bin/bash",
        max_procs=24,
    )
    schedule = make_schedule(
        admin_principal,
        {"type": "command", "command": name, "args": {}},
        retry=ONE_SHOT,
        timeout_s=4,
    )
    execution = make_execution(schedule)
    publish(execution.id, 1)
    peak = 0

    def bombing() -> bool:
        nonlocal peak
        peak = max(peak, count(name))
        return peak >= 20

    try:
        wait_for(bombing, timeout=20, what="the fork bomb to reach its limit")
    except AssertionError:
        execution.refresh_from_db()
        raise AssertionError(
            (peak, execution.state, execution.error, execution.log_excerpt)
        ) from None
    pump = Pump()

    def done() -> bool:
        nonlocal peak
        peak = max(peak, count(name))
        return final(execution)()

    pump.until(done, timeout=30)
    execution.refresh_from_db()
    assert execution.state == "dead" and execution.reason_code == "timeout", execution.error
    # 24 in the sandbox's namespace (its init included), plus bwrap's monitor outside it.
    assert peak <= 25, peak
    wait_for(lambda: count(name) == 0, timeout=10, what="every process of the bomb to be gone")
    assert worker.alive()


def test_deadline_kills_processes_that_left_the_process_group(
    worker: Proc, admin_principal: Principal
) -> None:
    name = register("setsid sleep 41.7 & sleep 41.8 & exec sleep 41.9")
    execution = run(admin_principal, name, timeout_s=1)
    assert execution.state == "dead" and execution.reason_code == "timeout"
    wait_for(
        lambda: (
            subprocess.run(["pgrep", "-f", "sleep 41.[789]"], capture_output=True).returncode == 1
        ),
        timeout=10,
        what="the sandbox's processes to be gone",
    )


def test_args_are_rechecked_at_run_time(worker: Proc, admin_principal: Principal) -> None:
    ManagedCommand.objects.create(name="echoer", argv=["/bin/echo", "{label}"])
    # Stored without the save-time check (an older definition, or a registration
    # narrowed since): the worker refuses it instead of running it.
    execution = run(admin_principal, "echoer", args={"label": "--output=/etc/x"})
    assert execution.state == "dead" and execution.reason_code == "bad_args", execution.error
    assert "label" in execution.error and execution.log_excerpt == ""
    execution = run(
        admin_principal, "echoer", env={"NODE_OPTIONS": {"secret": "env:X"}}, args={"label": "a"}
    )
    assert execution.state == "dead" and execution.reason_code == "bad_args", execution.error


def test_without_bwrap_commands_fail_closed_and_the_rest_keeps_working(
    tmp_path: Path,
    start_worker: Callable[..., Proc],
    ledger: Ledger,
    admin_principal: Principal,
) -> None:
    start_worker(
        "nobwrap",
        queues="sandbox.nobwrap",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        COMMAND_SANDBOX_BWRAP="/nonexistent/bwrap",
    )
    marker = tmp_path / "ran"
    name = register(f"touch {marker}")
    execution = run(admin_principal, name, queue="sandbox.nobwrap")
    assert execution.state == "dead" and execution.reason_code == "sandbox_unavailable"
    assert "bubblewrap" in execution.error and "/nonexistent/bwrap" in execution.error
    assert not marker.exists()
    http = make_execution(
        make_schedule(admin_principal, {"type": "http", "url": f"{ledger.url}/ok"}, retry=ONE_SHOT)
    )
    publish(http.id, 1, queue="sandbox.nobwrap")
    Pump(queue="sandbox.nobwrap").until(final(http), timeout=20)
    http.refresh_from_db()
    assert http.state == "succeeded", http.error
