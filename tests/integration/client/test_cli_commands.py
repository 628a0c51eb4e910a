"""`schedctl` against a live gunicorn: most commands through `main([...])`
in-process (output captured), and once through a real install of the package
(its `schedctl` entry point in a virtualenv of its own)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_support import (
    CLIENT_DIR,
    Tenant,
    definition,
    make_tenant,
)
from tests.support.procs import WebServer

from scheduler_client import Client  # isort: skip
from scheduler_client.cli import main  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No server configured: an empty config home, no SCHEDCTL_* variables."""
    for name in ("SCHEDCTL_URL", "SCHEDCTL_TOKEN", "SCHEDCTL_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def owner(db: Any, server: WebServer, home: Path, monkeypatch: pytest.MonkeyPatch) -> Tenant:
    tenant = make_tenant("billing")
    monkeypatch.setenv("SCHEDCTL_URL", server.url)
    monkeypatch.setenv("SCHEDCTL_TOKEN", tenant.token)
    return tenant


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)

    def rows(self) -> list[list[str]]:
        return [line.split() for line in self.out.splitlines()]


def schedctl(*argv: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return Run(code, out.getvalue(), err.getvalue())


def test_preview_needs_no_server(home: Path) -> None:
    run = schedctl("preview", "0 9 * * 1-5", "--tz", "Europe/Amsterdam", "--after", "2026-03-27T00:00:00Z", "--count", "3")  # fmt: skip
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0] == "At 09:00 AM, Monday through Friday"
    assert lines[1].split()[:2] == ["UTC", "LOCAL"]  # the table's header
    # Friday in CET, then Monday and Tuesday in CEST (the clocks went forward on Sunday).
    assert [line.split()[0] for line in lines[2:]] == [
        "2026-03-27T08:00:00Z",
        "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z",
    ]
    as_json = schedctl("preview", "30 2 * * *", "--tz", "Europe/Amsterdam", "--after", "2026-03-28T12:00:00Z", "--count", "1", "--json")  # fmt: skip
    assert as_json.code == 0
    only = as_json.json()["next_runs"][0]
    assert only["scheduled_for"] == "2026-03-29T01:00:00Z" and only["note"]  # the DST gap

    bad = schedctl("preview", "0 99 * * *")
    assert bad.code == 2 and bad.out == ""
    assert bad.err.startswith("error: ") and "hour" in bad.err and "99" in bad.err
    assert schedctl("preview", "0 9 * * *", "--tz", "Mars/Olympus").code == 2


def test_preview_takes_a_whole_timing_text(home: Path) -> None:
    # What a multi-spec schedule's `cron` holds: the specs united, bounds applied.
    timing = "0 9 * * * | every 90m from 2026-03-29T00:15:00 | end_at 2026-03-29T03:00:00Z"
    run = schedctl("preview", timing, "--tz", "Europe/Amsterdam", "--after", "2026-03-28T22:00:00Z", "--count", "5", "--json")  # fmt: skip
    assert run.code == 0, run.err
    got = [o["scheduled_for"] for o in run.json()["next_runs"]]
    # 00:15 and 01:45 CET, then 90 elapsed minutes later 04:15 CEST; end_at stops it.
    assert got == ["2026-03-28T23:15:00Z", "2026-03-29T00:45:00Z", "2026-03-29T02:15:00Z"]


def test_login_saves_a_private_config_and_never_prints_the_token(
    db: Any, server: WebServer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant("billing")
    assert schedctl("ls").code == 2  # nothing configured yet: a usage error
    path = home / "xdg" / "schedctl" / "config.toml"
    wrong = schedctl("login", "--url", server.url, "--token", "not-a-token")
    assert wrong.code == 1 and wrong.err.startswith("error: ")  # checked before it is saved
    assert not path.exists() and "not-a-token" not in wrong.out + wrong.err

    monkeypatch.setattr(sys, "stdin", io.StringIO(tenant.token + "\n"))
    run = schedctl("login", "--url", server.url, "--token-stdin")
    assert run.code == 0, run.err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tenant.token in path.read_text()
    assert tenant.token not in run.out + run.err

    listed = schedctl("ls")  # from the config file alone
    assert listed.code == 0, listed.err
    assert listed.rows() == [["ID", "NAME", "WHEN", "TIMEZONE", "PAUSED", "NEXT", "RUN", "VERSION"]]

    # The API's address as `make run` prints it (…/v1/), or without the slash: the same
    # server, saved as its address.
    for given in (f"{server.url}/v1/", f"{server.url}/v1", f"{server.url}/"):
        run = schedctl("login", "--url", given, "--token", tenant.token)
        assert run.code == 0, (given, run.err)
        assert f'url = "{server.url}"' in path.read_text(), path.read_text()
        assert schedctl("ls").code == 0


def _files(directory: Path) -> dict[str, str]:
    """Each entry of `directory`: a link as "-> target", a file as its mode."""
    return {
        p.name: f"-> {os.readlink(p)}" if p.is_symlink() else oct(stat.S_IMODE(p.stat().st_mode))
        for p in directory.iterdir()
    }


def test_login_never_writes_through_a_planted_link(db: Any, server: WebServer, home: Path) -> None:
    tenant = make_tenant("billing")
    folder = home / "xdg" / "schedctl"
    folder.mkdir(parents=True, mode=0o700)
    outside = home / "outside.txt"
    outside.write_text("untouched\n")
    outside.chmod(0o644)
    # The name the file used to be written to first, and the file itself.
    (folder / "config.toml.tmp").symlink_to(outside)
    elsewhere = home / "elsewhere.toml"
    elsewhere.write_text("also untouched\n")
    (folder / "config.toml").symlink_to(elsewhere)

    run = schedctl("login", "--url", server.url, "--token", tenant.token)
    assert run.code == 0, run.err
    assert outside.read_text() == "untouched\n" and stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert elsewhere.read_text() == "also untouched\n"
    # The planted link is left as it was; the config is a file of its own, 0600.
    assert _files(folder) == {"config.toml.tmp": f"-> {outside}", "config.toml": "0o600"}
    assert (folder / "config.toml").read_text() == (
        f'url = "{server.url}"\ntoken = "{tenant.token}"\n'
    )
    assert schedctl("ls").code == 0


def test_login_tightens_a_config_dir_of_ones_own_that_others_can_write(
    db: Any, server: WebServer, home: Path
) -> None:
    tenant = make_tenant("billing")
    folder = home / "xdg" / "schedctl"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    run = schedctl("login", "--url", server.url, "--token", tenant.token)
    assert run.code == 0, run.err
    assert run.err.splitlines()[0] == (
        f"{folder} was writable by other users (mode 0777); "
        "set to 0755 so that no one else can replace the token file"
    )
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert _files(folder) == {"config.toml": "0o600"}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_login_refuses_a_config_dir_of_someone_else_that_others_can_write(
    db: Any, server: WebServer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant("billing")
    folder = home / "shared"
    folder.mkdir()
    os.chown(folder, 65534, 65534)  # nobody's
    folder.chmod(0o777)
    monkeypatch.setenv("SCHEDCTL_CONFIG", str(folder / "config.toml"))
    run = schedctl("login", "--url", server.url, "--token", tenant.token)
    assert run.code == 2
    assert run.err == (
        f"error: login: {folder} is writable by other users (mode 0777) and is not yours: "
        "someone else could replace the token file or read the token through a link they "
        "plant. Use a directory only you can write: `mkdir -m 700 DIR` and set "
        "SCHEDCTL_CONFIG=DIR/config.toml (or unset it for the default)\n"
    )
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777
    assert _files(folder) == {}
    assert tenant.token not in run.out + run.err


def test_a_schedule_from_create_to_rm(owner: Tenant) -> None:
    created = schedctl("create", "--name", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Amsterdam", "--target-url", "https://billing.internal/hook", "--json")  # fmt: skip
    assert created.code == 0, created.err
    body = created.json()
    assert body["name"] == "nightly" and body["version"] == 1
    sid = body["id"]

    listed = schedctl("ls")
    assert listed.code == 0 and listed.rows()[0][:2] == ["ID", "NAME"]
    assert listed.rows()[1][:3] == [sid, "nightly", "30"]
    assert [s["id"] for s in schedctl("ls", "--json").json()] == [sid]

    got = schedctl("get", "nightly")  # by name
    assert got.code == 0 and f"id: {sid}" in got.out and "cron: 30 2 * * *" in got.out

    edited = schedctl("edit", "nightly", "--set", "jitter_s=30", "--json")
    assert edited.code == 0, edited.err
    assert edited.json()["jitter_s"] == 30 and edited.json()["version"] == 2
    stale = schedctl("edit", sid, "--set", "jitter_s=60", "--version", "1")
    assert stale.code == 1 and stale.err.startswith("error: ") and stale.out == ""

    paused = schedctl("pause", sid, "--reason", "deploy freeze")
    assert paused.code == 0 and "paused: deploy freeze" in paused.out
    assert schedctl("resume", sid, "--json").json()["paused"] is False

    triggered = schedctl("trigger", sid, "--json")
    assert triggered.code == 0 and triggered.json()["trigger"] == "manual"
    runs = schedctl("runs", "nightly")
    assert runs.code == 0 and runs.rows()[0][:2] == ["ID", "SCHEDULE"]
    assert runs.rows()[1][0] == triggered.json()["id"]
    assert schedctl("runs", "--failed", "--json").json() == []  # nothing failed

    why = schedctl("why", sid, "--at", "2026-03-29T01:00:00Z")
    assert why.code == 0, why.err
    answer = Client(os.environ["SCHEDCTL_URL"], owner.token).explain(sid, "2026-03-29T01:00:00Z")
    assert why.out.splitlines()[0] == answer.sentence and f"code: {answer.code}" in why.out
    assert schedctl("why", sid, "--at", "yesterday").code == 2

    removed = schedctl("rm", "nightly")
    assert removed.code == 0 and sid in removed.out
    gone = schedctl("get", sid)
    assert gone.code == 1 and gone.err.startswith("error: ")


def test_runs_name_each_schedule_and_keep_its_id_in_json(owner: Tenant) -> None:
    """`schedctl runs` across schedules says whose each run is by name (the id stays in
    --json); a deleted schedule's runs keep its id, the one thing left to name it."""
    ids = {}
    for name in ("orders-export", "ledger-close", "gone-soon"):
        made = schedctl("create", "--name", name, "--cron", "0 4 * * *", "--target-url", "https://billing.internal/hook", "--json")  # fmt: skip
        assert made.code == 0, made.err
        ids[name] = made.json()["id"]
        assert schedctl("trigger", name).code == 0
    assert schedctl("rm", "gone-soon").code == 0

    runs = schedctl("runs")
    assert runs.code == 0, runs.err
    header, *rows = runs.rows()
    assert header[:2] == ["ID", "SCHEDULE"]
    assert sorted(row[1] for row in rows) == sorted(
        ["orders-export", "ledger-close", ids["gone-soon"]]
    )
    as_json = schedctl("runs", "--json").json()
    assert sorted(r["schedule_id"] for r in as_json) == sorted(ids.values())

    one = schedctl("runs", "ledger-close")
    assert [row[1] for row in one.rows()[1:]] == ["ledger-close"]


def test_exit_codes_and_error_messages(owner: Tenant, server: WebServer, tmp_path: Path) -> None:
    invalid = schedctl("create", "--name", "bad", "--cron", "0 99 * * *", "--target-url", "https://billing.internal/hook")  # fmt: skip
    assert invalid.code == 2  # the API's 400: invalid input
    assert invalid.err.startswith("error: ") and "cron" in invalid.err
    assert invalid.err.count("out of range") == 1  # the message, not again as its detail

    from_file = tmp_path / "one.yaml"
    from_file.write_text(json.dumps(definition("from-file")))
    assert schedctl("create", "-f", str(from_file)).code == 0
    assert schedctl("create", "-f", str(tmp_path / "missing.yaml")).code == 2

    assert schedctl("nonsense").code == 2  # argparse: usage
    assert schedctl("get").code == 2  # a missing argument
    unauthorized = schedctl("--token", "not-a-token", "ls")
    assert unauthorized.code == 1 and unauthorized.err.startswith("error: ")
    assert schedctl("ls", "--json", "--url", server.url).code == 0  # options after the command


@pytest.mark.system  # a real pip install into a virtualenv: minutes of one core
def test_the_installed_entry_point(owner: Tenant, server: WebServer, tmp_path: Path) -> None:
    """`pip install ./clients/python` into a virtualenv of the test's own: its
    `schedctl` runs preview offline and talks to the server."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # Pip, setuptools and the client's dependencies from this environment (as with
    # --system-site-packages, which here would be the interpreter's, not the venv's).
    shared = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "shared.pth").write_text(shared + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--ignore-installed", str(CLIENT_DIR)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    schedctl_bin = env_dir / "bin" / "schedctl"
    assert schedctl_bin.exists()
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    preview = subprocess.run(
        [schedctl_bin, "preview", "0 9 * * 1-5", "--tz", "Europe/Amsterdam", "--json"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=run_env,
    )  # fmt: skip
    assert preview.returncode == 0, preview.stderr
    assert len(json.loads(preview.stdout)["next_runs"]) == 5
    where = subprocess.run(
        [python, "-c", "import scheduler_client.timing.cron as m; print(m.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=run_env,
    ).stdout  # fmt: skip
    assert where.startswith(site)  # the installed copy, not the repository's

    Client(server.url, owner.token).create_schedule(definition("installed"))
    listed = subprocess.run(
        [schedctl_bin, "ls", "--json"], capture_output=True, text=True, timeout=60,
        cwd=tmp_path, env=run_env,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [s["name"] for s in json.loads(listed.stdout)] == ["installed"]
    missing = subprocess.run(
        [schedctl_bin, "get", "no-such-schedule"], capture_output=True, text=True, timeout=60,
        cwd=tmp_path, env=run_env,
    )  # fmt: skip
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")
