"""DST time travel for the real processes: a throwaway PostgreSQL cluster whose clock
is moved to a chosen instant, with a real beat and a real worker running against it.

Only the database's clock is moved. The beat and the worker take "now" from
PostgreSQL (core.db.db_now, now()/statement_timestamp() in dispatch/sql; the beat
measures database-minus-local clock on every lease renewal; failure contract C5,
docs/explanation/failure-contract.md), so a
cluster started under libfaketime (`faketime -f "<offset>s" postgres ...`) moves the
whole platform's time, while the processes' own clocks — their intervals, sleeps and
HTTP timeouts — stay true. The server runs `postgres` directly (no pg_ctl, no shell):
its backends are forks of the postmaster and inherit the offset. A relative offset is
used rather than faketime's absolute `@` start, which children re-started by an exec
would reset to the start instant.

The clock runs at x1, not sped up: a speed factor shrinks every database-clock
duration (lease TTLs, the sessions' idle and statement timeouts, misfire grace)
against the processes' real-time intervals, so a lease keeper renewing every third
of a TTL in real seconds would see its leases expire between renewals. The time is
*jumped* instead, while no platform process runs: the cluster is started a few
minutes before the transition to create the schedules (their first runs are planned
from that instant, as a user creating them then would get), then restarted seconds
before the transition for the beat and the worker. Only the seconds around the
transition are lived through; a slow machine makes the beat late (its misfire
policy then runs the occurrence, still with the same scheduled_for), never wrong.

The cluster is migrated once at the real time (`template`) and copied per case, so
several transitions run side by side, each on its own clock. Seeding runs in a
child process (`python -m tests.support.timetravel seed`), through the services,
on the faked cluster: the test process's own Django stays on the test database.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
DB_NAME = "scheduler"
# Where the clock is moved for seeding, and then for the beat and worker: far enough
# before the transition that seeding (a Django start-up) finishes before the restart
# even on a loaded machine, near enough that little is caught up across the jump.
SEED_BEFORE = timedelta(minutes=5)
# How long before the transition the beat and the worker start: their start-up (four
# pairs side by side took 8-9 s at load 3 on 2 cores) must fit, with room to spare.
# A beat that still starts late runs the occurrence through its misfire policy, with
# the same scheduled_for: the comparison stays exact, only less of it is "live".
LEAD = timedelta(seconds=25)
# How long after the transition the processes are watched: the beat stages each run
# `--lookahead` (5 s) before it is due and plans every `--cycle` (0.2 s), so by then
# whatever it would fire at the transition it has staged and published.
SETTLE = timedelta(seconds=5)


def faketime_missing() -> str:
    """Why this machine cannot time-travel ("" when it can)."""
    return "" if shutil.which("faketime") else "faketime is not installed (Debian package faketime)"


def _server_account() -> str | None:
    """Who runs the server: PostgreSQL refuses root, so as root the embedded server's
    own user (or Debian's postgres) runs it; otherwise the current user."""
    if os.geteuid() != 0:
        return None
    for name in ("pgserver", "postgres"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise AssertionError("running as root, with no pgserver or postgres user to run PostgreSQL")


def _pg_bin(name: str) -> str:
    from config import embedded

    return embedded._pg_bin(name)


def _server_user() -> dict[str, Any]:
    account = _server_account()
    return {"user": account} if account else {}


class FakedCluster:
    """A PostgreSQL cluster in `base`, on a Unix socket only, started at a chosen instant."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.pgdata = base / "pg"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{quote(str(self.base), safe='')}/{DB_NAME}"

    def initdb(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        _own(self.base)
        subprocess.run(
            [
                _pg_bin("initdb"),
                "-D",
                str(self.pgdata),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            timeout=120,
            **_server_user(),
        )

    def clone(self, base: Path) -> FakedCluster:
        """A copy of this (stopped) cluster in `base`."""
        base.mkdir(parents=True, exist_ok=True)
        _own(base)
        subprocess.run(["cp", "-a", str(self.pgdata), str(base / "pg")], check=True, timeout=120)
        return FakedCluster(base)

    def start(self, at: datetime | None = None) -> None:
        """Start the server, its clock reading `at` now (the real time when None)."""
        cmd = [_pg_bin("postgres"), "-D", str(self.pgdata), "-k", str(self.base)]
        cmd += ["-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=60"]
        env = dict(os.environ)
        if at is not None:
            offset = (at - datetime.now(UTC)).total_seconds()
            cmd = ["faketime", "-f", f"{offset:+.3f}s", *cmd]
            # Timeouts and intervals inside the server stay true; only "now" moves.
            env["DONT_FAKE_MONOTONIC"] = "1"
        self._log = open(self.base / "postgres.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            **_server_user(),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"faked PostgreSQL did not start:\n{self.log()[-2000:]}")
            time.sleep(0.1)

    def _ready(self) -> bool:
        res = subprocess.run(
            [_pg_bin("pg_isready"), "-q", "-h", str(self.base), "-U", "postgres"], check=False
        )
        return res.returncode == 0

    def stop(self) -> None:
        """Fast shutdown of the postmaster (faketime's wrapper does not pass signals on),
        waiting until its pid file is gone so the cluster can start again at once."""
        if self.proc is None:
            return
        pidfile = self.pgdata / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
        deadline = time.monotonic() + 60
        while pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"faked PostgreSQL did not stop:\n{self.log()[-2000:]}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        path = self.base / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def query(self, sql: str, params: Any = None, dbname: str = DB_NAME) -> list[Any]:
        import psycopg

        with psycopg.connect(
            host=str(self.base), user="postgres", dbname=dbname, autocommit=True
        ) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def now(self) -> datetime:
        value: datetime = self.query("SELECT clock_timestamp()")[0][0]
        return value


def _own(path: Path) -> None:
    path.chmod(0o755)
    account = _server_account()
    if account:
        shutil.chown(path, account, account)


@contextlib.contextmanager
def template(base: Path) -> Iterator[FakedCluster]:
    """A stopped, migrated cluster to clone (migrated at the real time: the rows the
    migrations write carry no time the cases depend on)."""
    cluster = FakedCluster(base)
    cluster.initdb()
    cluster.start()
    try:
        cluster.query(f"CREATE DATABASE {DB_NAME}", dbname="postgres")
        env = _env(cluster.database_url)
        res = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
            cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if res.returncode:
            raise AssertionError(
                f"migrating the time-travel template failed:\n{res.stderr[-4000:]}"
            )
    finally:
        cluster.stop()
    yield cluster


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="config.settings")
    env.update(extra)
    return env


# --- one case: seed, jump, run ---------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A transition: the zone, its instant (UTC) and the schedules to create
    (name -> definition fields, `cron` at least)."""

    name: str
    zone: str
    transition: datetime
    schedules: dict[str, dict[str, Any]]
    # Dates (local, ISO) a calendar named "closed" excludes, for `exclude_calendars`.
    closed_dates: list[str] = field(default_factory=list)


@dataclass
class Seeded:
    created_at: dict[str, datetime]  # schedule name -> created_at (database clock)
    ids: dict[str, str]  # schedule name -> id
    # name -> [(scheduled_for, due_at)] from schedule_preview after created_at
    preview: dict[str, list[tuple[datetime, datetime]]]


def seed(cluster: FakedCluster, case: Case, target_url: str, allow: str) -> Seeded:
    """Create the case's tenant, calendar and schedules through the services, in a child
    process on the (running) faked cluster, and what the preview says they will run."""
    spec = {"zone": case.zone, "schedules": case.schedules, "closed": case.closed_dates}
    spec |= {"url": target_url}
    env = _env(cluster.database_url, TARGET_TEST_ALLOW=allow, PYTHONUNBUFFERED="1")
    res = subprocess.run(
        [sys.executable, "-m", "tests.support.timetravel", "seed"],
        cwd=ROOT, env=env, input=json.dumps(spec), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    if res.returncode:
        raise AssertionError(f"seeding {case.name} failed:\n{res.stderr[-4000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    when = datetime.fromisoformat
    return Seeded(
        created_at={n: when(s["created_at"]) for n, s in out.items()},
        ids={n: s["id"] for n, s in out.items()},
        preview={n: [(when(a), when(b)) for a, b in s["preview"]] for n, s in out.items()},
    )


def _seed_main() -> None:
    import django

    django.setup()
    from dispatch.selectors.schedules import schedule_preview
    from dispatch.services import calendars as calendar_writes
    from tenants import services as tenant_services
    from tenants.roles import Principal, Role
    from tests.support.worker_support import ONE_SHOT, make_schedule

    spec = json.loads(sys.stdin.read())
    tenant = tenant_services.tenant_create(slug="dst", name="DST")
    actor = Principal(tenant=tenant, role=Role.ADMIN, actor_kind="system", actor_id="dst",
                      label="dst")  # fmt: skip
    if spec["closed"]:
        source = {"type": "dates", "dates": spec["closed"], "name": "closed"}
        calendar_writes.calendar_create(actor=actor, data={"name": "closed", "sources": [source]})
    out: dict[str, Any] = {}
    for name, fields in spec["schedules"].items():
        schedule = make_schedule(
            actor,
            {"type": "http", "url": spec["url"]},
            retry=ONE_SHOT,
            name=name,
            timezone=spec["zone"],
            # A beat started late (a loaded machine) still runs what came due before it.
            misfire="catch_up",
            catch_up_limit=5,
            **fields,
        )
        occurrences = schedule_preview(schedule=schedule, after=schedule.created_at, count=10)
        out[name] = {
            "id": str(schedule.id),
            "created_at": schedule.created_at.isoformat(),
            "preview": [[o.scheduled_for.isoformat(), o.due_at.isoformat()] for o in occurrences],
        }
    print(json.dumps(out))


@dataclass(frozen=True)
class Fired:
    """One execution the beat created for a case's schedule."""

    id: str
    scheduled_for: datetime
    due_at: datetime
    state: str


@dataclass
class Outcome:
    case: Case
    seeded: Seeded
    horizon: datetime  # the database instant up to which the processes were watched
    fired: dict[str, list[Fired]]  # schedule name -> its executions, by scheduled_for
    logs: str  # the beat's and the worker's output, for failure messages
    beat_started_at: datetime | None = None  # database clock, when the beat registered

    def expected(self) -> dict[str, list[tuple[datetime, datetime]]]:
        """The preview's occurrences up to the horizon, per schedule."""
        return {n: [o for o in p if o[0] <= self.horizon] for n, p in self.seeded.preview.items()}


def travel(
    case: Case,
    template: FakedCluster,
    base: Path,
    *,
    ledger: Any,
    broker_db: int,
    lead: timedelta = LEAD,
    settle: timedelta = SETTLE,
) -> Outcome:
    """Seed `case` a few minutes before its transition, jump to `lead` before it, run
    a real beat and worker there until `settle` after it, and report what they did.

    The cases' schedules have nothing due between the transition and a minute after
    it, so the horizon (settle past the transition) cuts no run in half.

    The beat's settings are in database seconds, which at x1 are real seconds: a
    10 s lease (renewed every third), a 0.2 s cycle and a 5 s stage-ahead window, so
    the runs due at the transition are staged and published while the beat lives
    through it rather than at its start.
    """
    from django.conf import settings

    from core.redis_urls import kombu_url, redis_py_url
    from tests.support.procs import beat_cmd, processes, wait_for, worker_cmd

    cluster = template.clone(base)
    cluster.start(at=case.transition - SEED_BEFORE)
    try:
        seeded = seed(cluster, case, ledger.url, ledger.allow_entry)
        cluster.stop()
        run_from = case.transition - lead
        latest = max(seeded.created_at.values())
        assert latest < run_from, f"{case.name}: seeding ran until {latest}, past {run_from}"
        cluster.start(at=run_from)
        # Each case its own Redis database: a worker must only see its own cluster's runs.
        redis = redis_py_url(settings.REDIS_URL, db=broker_db)
        _flush(redis)
        env = {
            "DATABASE_URL": cluster.database_url,
            "CELERY_BROKER_URL": kombu_url(redis),
            "REDIS_URL": redis,
            "TARGET_TEST_ALLOW": ledger.allow_entry,
        }
        horizon = case.transition + settle
        names = {v: k for k, v in seeded.ids.items()}
        with processes(base) as start:
            beat = start(
                f"beat-{case.name}",
                beat_cmd("--name", f"dst-{case.name}", "--lease-ttl", "10", "--cycle", "0.2",
                         "--lookahead", "5"),
                **env,
            )  # fmt: skip
            worker = start(
                f"worker-{case.name}", worker_cmd(concurrency=1, name=f"dst-{case.name}"), **env
            )
            wait_for(lambda: cluster.now() >= horizon, timeout=120, interval=0.5,
                     what=f"{case.name}: the database clock to pass {horizon}")  # fmt: skip
            outcome = Outcome(case, seeded, horizon, {}, "")
            want = sum(len(v) for v in outcome.expected().values())

            def settled() -> bool:
                (done, open_) = cluster.query(
                    "SELECT count(*) FILTER (WHERE finished_at IS NOT NULL),"
                    " count(*) FILTER (WHERE finished_at IS NULL)"
                    " FROM dispatch_execution WHERE scheduled_for <= %s",
                    [horizon],
                )[0]
                return bool(done >= want and open_ == 0)

            # What is missing shows in the test's comparison, not as a timeout here.
            with contextlib.suppress(AssertionError):
                wait_for(settled, timeout=120, interval=0.5, what="the runs to finish")
            rows = cluster.query(
                "SELECT id, schedule_id, scheduled_for, due_at, state FROM dispatch_execution"
                " ORDER BY scheduled_for, id"
            )
            beat_started_at = cluster.query("SELECT min(started_at) FROM dispatch_beatnode")[0][0]
            logs = f"--- beat\n{beat.output()[-3000:]}\n--- worker\n{worker.output()[-3000:]}"
        fired: dict[str, list[Fired]] = {n: [] for n in seeded.ids}
        for eid, sid, scheduled_for, due_at, state in rows:
            fired[names[str(sid)]].append(Fired(str(eid), scheduled_for, due_at, state))
        outcome.fired, outcome.logs, outcome.beat_started_at = fired, logs, beat_started_at
        return outcome
    finally:
        cluster.stop()


def _flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["seed"]:
        raise SystemExit("usage: python -m tests.support.timetravel seed < spec.json")
    _seed_main()
