"""A primary that vanishes without a reset — power or network lost: nothing closes its
connections, so a process waiting on one waits for TCP to give up. A multi-host
DATABASE_URL defaults to libpq's TCP bounds (core/pg_urls.py: keepalives and
tcp_user_timeout=15000), so such a wait ends in about 15 s with an error the platform
treats as "unreachable" (and reconnects), instead of TCP's 15 minutes or more.

A real dead link, not the fault proxy (whose userspace black hole still has a live
kernel answering TCP): a network namespace of the test's own holds a throwaway
PostgreSQL and the client; taking the namespace's loopback down drops every packet
between them with no reset, as a cut cable does. The client is the platform's own
connection (Django, configured from the multi-host URL by config/settings.py) beside
a control connection to the same server without the bounds, which must still be
waiting when the platform's has failed: the test can tell the difference.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hacluster import OS_USER, PG_BIN, as_postgres
from tests.support.procs import ROOT, child_env

pytestmark = [pytest.mark.system, pytest.mark.chaos, pytest.mark.slow]

PORT = 5432  # inside the namespace: nothing else listens there
# Sanity bounds, not targets: the default tcp_user_timeout is 15 s.
FAIL_BOUND_S = 90.0
CONTROL_STILL_WAITING_S = 10.0  # after the platform's connection failed

CLIENT = r"""
import json, sys, threading, time
import django
django.setup()
import psycopg
from django.db import connection
from core.db import unavailable_reason

connection.ensure_connection()
options = connection.settings_dict["OPTIONS"]
# The control: the same server, none of the bounds (libpq's defaults: keepalives on
# at the kernel's 2 h idle, no user timeout).
control = psycopg.connect(host="127.0.0.1", port=%(port)d, user="postgres", dbname="postgres")
print(json.dumps({"ready": True, "options": {k: str(v) for k, v in options.items()}}), flush=True)
sys.stdin.readline()  # the link goes down now
results = {}

def platform():
    t = time.monotonic()
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        results["platform"] = {"error": None}
    except Exception as exc:
        reason = unavailable_reason(exc)
        results["platform"] = {"error": type(exc).__name__, "reason": reason and reason.value}
    results["platform"]["after_s"] = round(time.monotonic() - t, 1)

def bare():
    t = time.monotonic()
    try:
        control.execute("SELECT 1")
        results["control"] = {"error": None}
    except Exception as exc:
        results["control"] = {"error": type(exc).__name__}
    results["control"]["after_s"] = round(time.monotonic() - t, 1)

threads = [threading.Thread(target=f, daemon=True) for f in (platform, bare)]
for th in threads:
    th.start()
threads[0].join(%(fail_bound)f)
threads[1].join(%(still)f)
results["control_still_waiting"] = threads[1].is_alive()
print(json.dumps(results), flush=True)
"""


def missing() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "the ip command (Debian package iproute2) is not installed"
    if not (PG_BIN / "postgres").exists():
        return f"{PG_BIN / 'postgres'} not found (Debian package postgresql-15)"
    return ""


def netns(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


@pytest.fixture
def namespace_with_postgres() -> Iterator[str]:
    """A network namespace of its own (loopback up) running a throwaway PostgreSQL on
    127.0.0.1:PORT as the postgres user; everything removed afterwards."""
    why = missing()
    if why:
        pytest.skip(why)
    ns = f"sched-deadlink-{os.getpid()}"
    base = Path(tempfile.mkdtemp(prefix="deadlink-"))
    base.chmod(0o755)
    data = base / "data"
    server: subprocess.Popen[bytes] | None = None
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        subprocess.run(netns(ns, "ip", "link", "set", "lo", "up"), check=True)
        shutil.chown(base, OS_USER, OS_USER)
        subprocess.run(
            as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
                         "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]),
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        server = subprocess.Popen(
            netns(ns, *as_postgres([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(PORT),
                                    "-c", "listen_addresses=127.0.0.1",
                                    "-c", f"unix_socket_directories={base}"])),
            stdout=subprocess.DEVNULL, stderr=(base / "server.log").open("wb"),
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while subprocess.run(
            netns(ns, str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(PORT)),
            capture_output=True,
        ).returncode:
            if time.monotonic() > deadline or server.poll() is not None:
                raise AssertionError((base / "server.log").read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        yield ns
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(300)
def test_a_connection_to_a_primary_that_vanished_without_a_reset_fails_in_seconds(
    namespace_with_postgres: str,
) -> None:
    ns = namespace_with_postgres
    # A host list (the second host is never reached: the first takes writes), so the
    # multi-host defaults apply, read by config/settings.py as every process does.
    url = f"postgresql://postgres@127.0.0.1:{PORT},127.0.0.1:{PORT + 1}/postgres"
    code = CLIENT % {"port": PORT, "fail_bound": FAIL_BOUND_S, "still": CONTROL_STILL_WAITING_S}
    env = child_env(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="config.settings")
    client = subprocess.Popen(
        netns(ns, sys.executable, "-c", code),
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert client.stdout is not None and client.stdin is not None
        ready = json.loads(client.stdout.readline() or "{}")
        assert ready.get("ready"), client.stderr.read() if client.stderr else ""
        assert ready["options"]["tcp_user_timeout"] == "15000", ready
        # The cable is cut: every packet between client and server dropped, no reset.
        subprocess.run(netns(ns, "ip", "link", "set", "lo", "down"), check=True)
        client.stdin.write("go\n")
        client.stdin.flush()
        line = client.stdout.readline()
        assert line, client.stderr.read() if client.stderr else ""
        results = json.loads(line)
    finally:
        client.kill()
        client.wait(10)
    print(f"\n[dead primary] {json.dumps(results)}")
    platform = results["platform"]
    # The platform's connection failed, as "unreachable" (its process reconnects)...
    assert platform["error"] == "OperationalError", results
    assert platform["reason"] == "unreachable", results
    assert platform["after_s"] < FAIL_BOUND_S, results
    # ... while a connection without the bounds was still waiting on the dead link.
    assert results["control_still_waiting"], results
