"""`make run` as a newcomer runs it: the Makefile's own command line, on a fresh
data folder (embedded PostgreSQL and Redis) and a free port. Static files are
served with DEBUG off, htmx loads and runs in Chromium, the login box is the
last thing printed, and the demo schedules run against the demo receiver."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import shot
from tests.support.net import free_port
from tests.support.procs import server_data_dir

pytestmark = [pytest.mark.system, pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BOX_END = "Ctrl-C stops everything."


def make_run_argv() -> list[str]:
    """The `run` recipe of the Makefile, with its variables filled in."""
    text = (ROOT / "Makefile").read_text()
    embed = re.search(r"^EMBED := (.+)$", text, re.M)
    recipe = re.search(r"^run: .*\n\t(.+)$", text, re.M)
    assert embed and recipe, "Makefile has no EMBED / run recipe"
    line = recipe.group(1).replace("$(EMBED)", embed.group(1))
    line = line.replace("$(BIN)/python", sys.executable)
    assert "$(" not in line, line
    return shlex.split(line)


@dataclass
class Platform:
    proc: subprocess.Popen[bytes]
    url: str
    data: Path
    log: Path
    started: float

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def api(self, path: str) -> Any:
        token = (self.data / "demo-token").read_text().strip()
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)


def _wait(predicate: Any, timeout: float, what: str, platform: Platform | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if platform is not None and platform.proc.poll() is not None:
            raise AssertionError(f"make run exited while waiting for {what}:\n{platform.output()}")
        time.sleep(0.2)
    tail = platform.output()[-4000:] if platform else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")


@pytest.fixture(scope="module")
def platform() -> Iterator[Platform]:
    with server_data_dir("sched-makerun-") as data:
        yield from _platform(data)


def _platform(data: Path) -> Iterator[Platform]:
    base = data.parent
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "LOG_LEVEL"}
        and not k.startswith(("PYTEST_", "DJANGO_ALLOW_ASYNC"))
    }
    url_port = free_port()
    env.update(
        DATA_DIR=str(data),
        WEB_BIND=f"127.0.0.1:{url_port}",
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    log = base / "make-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            make_run_argv(),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    p = Platform(proc, f"http://127.0.0.1:{url_port}", data, log, time.monotonic())
    try:
        _wait(lambda: BOX_END in p.output(), 240, "the login box", p)
        yield p
    finally:
        # Ctrl-C, as a user stops it: every child and both servers go away.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        subprocess.run(
            [sys.executable, "-m", "config.embedded", "stop"], cwd=ROOT, env=env, timeout=120
        )


def test_the_command_line_is_the_makefiles() -> None:
    argv = make_run_argv()
    assert argv[-3:] == [sys.executable, "manage.py", "run_platform"]
    assert argv[1:5] == ["-m", "config.embedded", "run", "--"]


def test_static_files_are_served_with_their_content_types(platform: Platform) -> None:
    for path, kind, needle in (
        ("/static/console/console.css", "text/css", b"{"),
        ("/static/console/console.js", "javascript", b"use strict"),
        ("/static/django_htmx/htmx-2.min.js", "javascript", b"htmx"),
    ):
        with urllib.request.urlopen(platform.url + path, timeout=10) as resp:
            assert resp.status == 200, path
            assert kind in resp.headers["Content-Type"], (path, resp.headers["Content-Type"])
            assert needle in resp.read(), path


def test_the_login_box_is_the_last_output_and_the_banners_are_quiet(platform: Platform) -> None:
    lines = platform.output().splitlines()
    end = max(i for i, line in enumerate(lines) if BOX_END in line)
    top = max(i for i in range(end) if lines[i].startswith("+---"))
    boxed = "\n".join(lines[top : end + 2])
    user, password = (platform.data / "admin-credentials").read_text().split()
    token = (platform.data / "demo-token").read_text().strip()
    assert f"{user} / {password}" in boxed
    assert token in boxed
    assert f"Console  {platform.url}/" in boxed
    # What came before the box fits on a screen: no Celery or runserver banners.
    before = [line for line in lines[:top] if line.strip()]
    assert len(before) <= 12, "\n".join(before)
    assert not any("celery@" in line or "Starting development server" in line for line in lines)


def test_the_demo_schedules_run_against_the_demo_receiver(platform: Platform) -> None:
    schedules = {s["name"]: s["id"] for s in platform.api("/v1/schedules?limit=100")["results"]}
    assert {"demo-heartbeat", "demo-report", "demo-failing"} <= set(schedules)

    def executions(name: str) -> list[dict[str, Any]]:
        page = platform.api(f"/v1/executions?schedule_id={schedules[name]}")
        return list(page["results"])

    def states() -> dict[str, set[str]]:
        return {name: {e["state"] for e in executions(name)} for name in schedules}

    left = max(5.0, 90 - (time.monotonic() - platform.started))
    _wait(
        lambda: (
            "succeeded" in (s := states())["demo-heartbeat"]
            and "succeeded" in s["demo-report"]
            and s["demo-failing"] & {"retry_scheduled", "failed", "dead"}
        ),
        left,
        "the demo executions",
        platform,
    )
    failing = [e for e in executions("demo-failing") if e["state"] != "succeeded"]
    assert any("503" in (e.get("error") or "") for e in failing), failing


def test_console_in_chromium_loads_css_and_htmx_runs(browser: Any, platform: Platform) -> None:
    user, password = (platform.data / "admin-credentials").read_text().split()
    context = browser.new_context(base_url=platform.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    problems: list[str] = []
    page = context.new_page()
    # CSP refusals and failed requests (a browser's own favicon probe aside).
    page.on("console", lambda msg: problems.append(msg.text) if "Refused" in msg.text else None)
    page.on(
        "response",
        lambda r: (
            problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    try:
        page.goto("/login/")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/")
        # The stylesheet applied (the skip link is moved off-screen by it) and htmx loaded.
        assert page.evaluate("() => typeof window.htmx") == "object"
        assert page.evaluate("() => document.styleSheets.length >= 1")
        assert page.evaluate(
            "() => getComputedStyle(document.querySelector('a.skip')).position"
        ) in ("absolute", "fixed")
        page.goto("/schedules/new")
        page.get_by_label("Name").fill("weekday-report")
        cron = page.get_by_label("Cron")
        cron.fill("")
        cron.press_sequentially("0 9 * * 1-5", delay=30)
        # Only htmx fetching the preview as you type can put this on the page.
        page.locator("#preview").get_by_text("At 09:00 AM, Monday through Friday").wait_for()
        shot(page, "make-run-live-preview")
    finally:
        context.close()
    assert not problems, problems
