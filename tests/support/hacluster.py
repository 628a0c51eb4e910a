"""A replicated PostgreSQL 15 of a test's own: one etcd member and two Patroni nodes
on loopback, in a temporary folder, on free ports — never the machine's server.

    with HACluster() as cluster:          # boots, waits for a leader and a sync standby
        cluster.url("sched")              # postgresql://postgres@127.0.0.1:p1,127.0.0.1:p2/sched?...
        cluster.kill_node(cluster.leader())  # patroni and every postgres process: SIGKILL
        cluster.wait_leader(other_than=...)
        cluster.start_node(name)          # back as a standby (pg_rewind if it must)
        cluster.switchover()              # planned: Patroni's REST API
        cluster.cut_off(name)             # a network partition: its links to the cluster
        cluster.heal(name)                #   black-holed, its clients' direct links kept
        cluster.pause_replay(name)        # a standby that receives WAL but applies none
        cluster.resume_replay(name)       #   (the cluster in maintenance mode meanwhile)
    # torn down: nothing it started is left running (checked, not assumed)

Patroni runs with synchronous_mode on (a commit is acknowledged once the sync standby
has it, so a promotion loses nothing acknowledged), ttl 10, loop_wait 1 and
retry_timeout 4 (Patroni wants loop_wait + 2 * retry_timeout <= ttl).

Each node reaches the cluster through fault proxies of the suite's own
(tests/support/faultproxy.py): its Patroni's link to etcd, and the addresses it
advertises to the other node — its PostgreSQL's (the standby replicates and rewinds
through it) and its REST API's. Black-holing the three cuts a node off from the
cluster while its PostgreSQL stays reachable on its own port, which is what the
platform's URL names: a partition in which a client could still write to an old
primary.

PostgreSQL refuses to run as root, so Patroni (and the postgres it starts) runs as
the `postgres` user through setpriv; etcd runs as whoever runs the tests. The Debian
packages `patroni` and `etcd-server` provide the programs (`.ci/run` installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import yaml

from tests.support.faultproxy import FaultProxy
from tests.support.net import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
OS_USER = "postgres"
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 4


def missing() -> str:
    """Why a cluster cannot be started here ("" when it can)."""
    for path, package in (
        (Path(PATRONI), "patroni"),
        (Path(ETCD), "etcd-server"),
        (PG_BIN / "postgres", "postgresql-15"),
    ):
        if not path.exists():
            return f"{path} not found (Debian package {package})"
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no {OS_USER!r} user to run PostgreSQL as"
    if os.geteuid() != 0:
        return "starting PostgreSQL as the postgres user needs root"
    return ""


def as_postgres(cmd: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups", *cmd]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) counts as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _runs_data_dir(pid: int, data_dir: Path) -> bool:
    """Whether `pid` is a postmaster of `data_dir` (its command line names it): a pid
    read from postmaster.pid, or remembered, may since belong to anyone else."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _alive(pid) and str(data_dir).encode() in argv


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _get(url: str, timeout: float = 2) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as res:
        return json.loads(res.read() or b"null")


@dataclass
class Node:
    name: str
    pg_port: int
    api_port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None
    # Every postmaster this node ran (a restart in place gets a new one), for teardown.
    postmasters: set[int] = field(default_factory=set)
    # Its links to the rest of the cluster (see the module's docstring): to etcd, and
    # the PostgreSQL and REST API addresses it advertises to the other nodes.
    links: dict[str, FaultProxy] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def advertised(self, link: str) -> str:
        return f"127.0.0.1:{self.links[link].port}"

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if _runs_data_dir(pid, self.data_dir):
            self.postmasters.add(pid)
            return pid
        return None

    def live_postmasters(self) -> list[int]:
        """The postmasters it ran that still run (a pid reused by another process is not one)."""
        return [pid for pid in self.postmasters if _runs_data_dir(pid, self.data_dir)]


class HACluster:
    """etcd + two Patroni-managed PostgreSQL 15 nodes (see the module's docstring)."""

    def __init__(
        self, base: Path | None = None, *, nodes: int = 2, scope: str = "sched-ha"
    ) -> None:
        self._own_base = base is None
        # Outside pytest's basetemp: pytest resets that to 0700 per session, and the
        # postgres user must reach its data directory.
        self.base = base or Path(tempfile.mkdtemp(prefix="hacluster-"))
        self.base.chmod(0o755)
        self.scope = scope
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self._etcd_log: Any = None
        self.nodes = {
            f"pg{i}": Node(f"pg{i}", free_port(), free_port(), self.base / f"pg{i}")
            for i in range(1, nodes + 1)
        }
        for node in self.nodes.values():
            node.links = {
                "etcd": FaultProxy(("127.0.0.1", self.etcd_port)),
                "postgresql": FaultProxy(("127.0.0.1", node.pg_port)),
                "restapi": FaultProxy(("127.0.0.1", node.api_port)),
            }

    # --- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> HACluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 90) -> None:
        self._start_etcd()
        for node in self.nodes.values():
            self._write_config(node)
        # The first node bootstraps (initdb); the others start once it leads, and
        # clone it with pg_basebackup.
        first, *rest = self.nodes
        self.start_node(first)
        self.wait_leader(timeout=timeout)
        for name in rest:
            self.start_node(name)
        self.wait_healthy(timeout=timeout)

    def _start_etcd(self) -> None:
        data = self.base / "etcd"
        data.mkdir()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._etcd_log = open(self.base / "etcd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.etcd = subprocess.Popen(
            [
                ETCD,
                "--name=etcd1",
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=etcd1={peer}",
                "--initial-cluster-state=new",
                # No v2 store: Patroni speaks v3 (etcd3).
                "--enable-v2=false",
            ],
            stdout=self._etcd_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait(lambda: self._etcd_healthy(client), 30, "etcd to answer")

    def _etcd_healthy(self, client: str) -> bool:
        if self.etcd is not None and self.etcd.poll() is not None:
            raise AssertionError(f"etcd exited:\n{self.log('etcd')[-2000:]}")
        try:
            return bool(_get(f"{client}/health", timeout=1).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _write_config(self, node: Node) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        uid, gid = pwd.getpwnam(OS_USER).pw_uid, pwd.getpwnam(OS_USER).pw_gid
        os.chown(node.dir, uid, gid)
        node.dir.chmod(0o700)
        config = {
            "scope": self.scope,
            "namespace": "/service/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": node.advertised("restapi"),
            },
            # use_proxies: keep to the address given; etcd's member list would name the
            # real port and so bypass the node's link.
            "etcd3": {"hosts": [node.advertised("etcd")], "use_proxies": True},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1024 * 1024,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_connections": 100,
                            "max_wal_senders": 5,
                            "max_replication_slots": 5,
                            "shared_buffers": "32MB",
                            # A test cluster: a shorter checkpoint distance keeps the
                            # data directories small; fsync stays on (a kill must be real).
                            "max_wal_size": "64MB",
                            # When each row was committed: which node accepted a write
                            # after which moment (a cut-off old primary must accept none).
                            "track_commit_timestamp": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": node.advertised("postgresql"),
                "data_dir": str(node.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.dir / "pgpass"),
                # A standby cloned (or rebuilt after a failed rewind) without waiting
                # for a spread checkpoint of the primary.
                "basebackup": [{"checkpoint": "fast"}],
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "parameters": {"unix_socket_directories": str(node.dir)},
            },
        }
        path = node.dir / "patroni.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        os.chown(path, uid, gid)

    def start_node(self, name: str) -> None:
        """Start (or restart) node `name`'s Patroni; a node that lost the lead rejoins as a standby."""
        node = self.nodes[name]
        if node.proc is not None and node.proc.poll() is None:
            return
        if node.log is not None:
            node.log.close()
        node.log = open(self.base / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        node.proc = subprocess.Popen(
            as_postgres([PATRONI, str(node.dir / "patroni.yml")]),
            stdout=node.log,
            stderr=subprocess.STDOUT,
            cwd=node.dir,
            start_new_session=True,
        )

    def stop(self) -> None:
        """Stop everything it started: Patroni shuts its postgres down; whatever is left
        (a postmaster orphaned by a killed Patroni, its backends) is killed, then etcd."""
        for node in self.nodes.values():
            node.postmaster_pid()
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            if node.proc is not None:
                try:
                    node.proc.wait(30)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(10)
            for pid in node.live_postmasters():
                self._kill_tree(pid)
            if node.log is not None:
                node.log.close()
                node.log = None
            for proxy in node.links.values():
                proxy.close()
        if self.etcd is not None:
            if self.etcd.poll() is None:
                self.etcd.terminate()
                try:
                    self.etcd.wait(10)
                except subprocess.TimeoutExpired:
                    self.etcd.kill()
                    self.etcd.wait(10)
            self._etcd_log.close()
            self.etcd = None
        left = self.running()
        if self._own_base and not left and not os.environ.get("HACLUSTER_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)
        if left:
            raise AssertionError(f"processes left running after teardown: {left}")

    def running(self) -> list[int]:
        """Pids of anything it started that is still alive (empty after `stop`)."""
        # Its own children (Patroni, etcd) by their Popen; the postmasters Patroni
        # detached, by their data directory.
        pids = [n.proc.pid for n in self.nodes.values() if n.proc and n.proc.poll() is None]
        pids += [pid for n in self.nodes.values() for pid in n.live_postmasters()]
        if self.etcd is not None and self.etcd.poll() is None:
            pids.append(self.etcd.pid)
        return pids

    # --- faults --------------------------------------------------------------------------

    def kill_postmaster(self, name: str) -> int:
        """SIGKILL node `name`'s postmaster only; its Patroni lives on and decides what
        follows (on the leader: restart in place, keeping the leader key). Its pid."""
        node = self.nodes[name]
        pid = node.postmaster_pid()
        if pid is None:
            raise AssertionError(f"{name} runs no postmaster")
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_node(self, name: str) -> None:
        """The machine lost: Patroni, the postmaster and every backend SIGKILLed at once.
        The leader key then lapses after the ttl and the standby is promoted."""
        node = self.nodes[name]
        victims = []
        pid = node.postmaster_pid()
        if pid is not None:
            victims += [pid, *_children(pid)]
        if node.proc is not None:
            victims.append(node.proc.pid)
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        if node.proc is not None:
            node.proc.wait(10)
        self._wait(lambda: not any(_alive(v) for v in victims), 10, f"{name} to die")

    def cut_off(self, name: str) -> None:
        """Node `name` loses the cluster, not its clients: its links to etcd and from
        the other node black-holed, every process alive. As a primary it can no longer
        renew the leader key (Patroni demotes it) nor hear from its sync standby (a
        commit waits), and the standby is promoted once the key lapses."""
        for proxy in self.nodes[name].links.values():
            proxy.blackhole()

    def heal(self, name: str) -> None:
        """Node `name`'s links forward again (it rejoins; as an old primary, rewound)."""
        for proxy in self.nodes[name].links.values():
            proxy.pass_()

    def _kill_tree(self, pid: int) -> None:
        for victim in [pid, *_children(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        # Children of init are reaped by it; wait for the pids to go.
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def switchover(self, candidate: str | None = None, timeout: float = 60) -> str:
        """A planned switchover through the leader's REST API; the new leader's name."""
        leader = self.leader()
        if leader is None:
            raise AssertionError("no leader to switch over from")
        candidate = candidate or next(n for n in self.nodes if n != leader)
        body = json.dumps({"leader": leader, "candidate": candidate}).encode()
        req = urllib.request.Request(
            f"{self.nodes[leader].api}/switchover",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                res.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"switchover refused: {exc.code} {exc.read()!r}") from None
        return self.wait_leader(other_than=leader, timeout=timeout)

    def configure(self, **dcs: Any) -> None:
        """Change cluster-wide settings (Patroni's dynamic configuration, kept in etcd:
        `synchronous_mode`, `maximum_lag_on_failover`...) through the leader's REST API,
        as `patronictl edit-config` does; each node applies them on its next loop."""
        leader = self.leader()
        if leader is None:
            raise AssertionError("no leader to configure the cluster through")
        req = urllib.request.Request(
            f"{self.nodes[leader].api}/config",
            data=json.dumps(dcs).encode(),
            method="PATCH",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                res.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"configuration refused: {exc.code} {exc.read()!r}") from None

    def pause_replay(self, name: str, timeout: float = 30) -> None:
        """Stop standby `name` applying WAL (it keeps receiving it): a replica that falls
        behind for as long as the test wants. Patroni resumes a paused replay on its
        next loop unless the cluster is in maintenance mode, so that is set first."""
        self.configure(pause=True)

        def everyone_paused() -> bool:
            with contextlib.suppress(OSError, ValueError):
                return all(_get(f"{node.api}/patroni").get("pause") for node in self.nodes.values())
            return False

        self._wait(everyone_paused, timeout, "every node in maintenance mode")
        with psycopg.connect(self.node_url(name, "postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")

            def paused() -> bool:
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                return bool(row and row[0] == "paused")

            # A pause request takes effect between two WAL records.
            self._wait(paused, timeout, f"{name}'s replay to pause")

    def resume_replay(self, name: str) -> None:
        with psycopg.connect(self.node_url(name, "postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        self.configure(pause=False)

    # --- state ---------------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (from any node that answers)."""
        for node in self.nodes.values():
            if node.proc is None or node.proc.poll() is not None:
                continue
            try:
                members: list[dict[str, Any]] = _get(f"{node.api}/cluster", timeout=1)["members"]
                return members
            except (OSError, ValueError, KeyError):
                continue
        return []

    def leader(self) -> str | None:
        """The node that holds the leader key and runs as a primary, or None."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def promoted_at(self, name: str, *, after: float, timeout: float = 30) -> float:
        """When node `name` was promoted after `after` (epoch seconds): Patroni's timeline
        history, which the new leader writes to etcd within a loop or two of its promotion."""
        from datetime import datetime

        def entry() -> list[Any] | None:
            try:
                history = _get(f"{self.nodes[name].api}/history", timeout=2) or []
            except (OSError, ValueError):
                return None
            # [timeline, lsn, reason, timestamp, new leader]
            mine = [
                h
                for h in history
                if len(h) >= 5 and h[4] == name and datetime.fromisoformat(h[3]).timestamp() > after
            ]
            return mine[-1] if mine else None

        found: list[Any] = self._wait(entry, timeout, f"{name}'s promotion in the history")
        return datetime.fromisoformat(str(found[3])).timestamp()

    def sync_standby(self) -> str | None:
        for member in self.members():
            if member.get("role") == "sync_standby" and member.get("state") in (
                "running",
                "streaming",
            ):
                return str(member["name"])
        return None

    def wait_leader(self, *, other_than: str | None = None, timeout: float = 60) -> str:
        def found() -> str | None:
            leader = self.leader()
            return leader if leader and leader != other_than else None

        leader: str = self._wait(found, timeout, f"a leader other than {other_than}")
        # A leader is writable once the multi-host URL lands on it.
        self._wait(lambda: self.writable(self.url("postgres")), timeout, "a writable primary")
        return leader

    def wait_healthy(self, timeout: float = 90) -> tuple[str, str]:
        """Every node up: a leader, and a synchronous standby streaming from it."""

        def healthy() -> tuple[str, str] | None:
            leader, sync = self.leader(), self.sync_standby()
            return (leader, sync) if leader and sync else None

        pair: tuple[str, str] = self._wait(healthy, timeout, "a leader and a sync standby")
        return pair

    def url(self, dbname: str, **options: str) -> str:
        """The libpq multi-host URL of every node: each new connection lands on the primary."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes.values())
        query = "&".join(
            f"{k}={v}"
            for k, v in (
                {"target_session_attrs": "read-write", "connect_timeout": "2"} | options
            ).items()
        )
        return f"postgresql://postgres@{hosts}/{dbname}?{query}"

    def node_url(self, name: str, dbname: str) -> str:
        """Node `name` alone, whatever its role: a client that stays on it."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.nodes[name].pg_port}/{dbname}?connect_timeout=2"
        )

    @staticmethod
    def writable(url: str) -> bool:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                return conn.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)
        except psycopg.Error:
            return False

    def log(self, name: str) -> str:
        path = self.base / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        logs = "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in ["etcd", *self.nodes])
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
