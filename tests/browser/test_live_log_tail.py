"""The live log tail in Chromium: a managed command that prints a numbered line every
100 ms, run by a real beat and worker in the bubblewrap sandbox, is visible on its
execution page within 1 s of each line, while the execution is still running.

Each line carries the wall-clock instant the command printed it; the page records
(a MutationObserver, installed through Playwright, which CSP does not govern) when
each line first appears in its DOM and whether the page then said "running". The
delay is measured per line: no total duration is asserted."""

from __future__ import annotations

import re
import shutil
import statistics
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatch import selectors, services
from dispatch.models import Execution, ManagedCommand
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.browser.conftest import login, shot
from tests.support.console_support import user
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import ONE_SHOT, beat_and_worker, state_of

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap (.ci/run installs it)"
    ),
]
PW = "browser-pw-Хвост-7"
LINES = 60  # printed 100 ms apart: about 6 s of output
# The requirement: each line on the page within 1 s of being printed. The page gets
# new lines when the live log's follower (#live-log-follow in
# templates/console/execution_detail.html) asks for them: a line waits for the next
# ask, so its interval (console.views.executions.LIVE_LOG_POLL_MS) is the floor of
# the worst delay.
MAX_DELAY_S = 1.0
MIN_MEASURED = 20
# Each line with the instant it was printed; then 2 s of silence, so the last lines
# too are due on the page (within 1 s) while the command still runs.
SCRIPT = f"for i in $(seq 1 {LINES}); do echo line-$i $(date +%s.%N); sleep 0.1; done; sleep 2"
LINE = re.compile(r"^line-(\d+) (\d+\.\d+)$")
FINAL = {"succeeded", "dead", "cancelled"}

# When each line first appears in the page (wherever the polling swaps it in), whether
# the state shown with it was "running", and whether it was in view in the log's box
# (which scrolls: the newest line must not be hidden below older ones); the lines
# already there are noted at the arming instant, which the test uses to leave out
# lines printed before it.
OBSERVE = """() => {
  const seen = {};
  const armedAt = Date.now() / 1000;
  const scan = () => {
    const shown = Date.now() / 1000;
    const log = document.getElementById("execution-live-log");
    if (!log) { return; }
    const running = document.querySelector("#execution-state .badge-run") !== null;
    const box = log.getBoundingClientRect();
    for (const span of log.querySelectorAll("span")) {
      const m = /^line-(\\d+) (\\d+\\.\\d+)$/.exec(span.textContent);
      if (m && !(m[1] in seen)) {
        const at = span.getBoundingClientRect();
        const inView = at.top >= box.top - 1 && at.bottom <= box.bottom + 1;
        seen[m[1]] = {shown: shown, running: running, inView: inView};
      }
    }
  };
  scan();
  new MutationObserver(scan).observe(document.body,
    {childList: true, subtree: true, characterData: true});
  window.__liveTail = {armedAt: armedAt, seen: seen};
  return armedAt;
}"""


@pytest.fixture
def platform(tenant: Tenant, ledger: Ledger, tmp_path: Path) -> Iterator[dict[str, Proc]]:
    """A real beat and a real Celery worker (managed commands in bwrap, the default)."""
    with beat_and_worker(tmp_path, ledger, beat_name="tail-beat", worker_name="tailw") as procs:
        yield procs


def _printed(execution_id: str) -> dict[int, tuple[float, float]]:
    """Each line the command printed, from the attempt's log (kept with the execution
    once it ended): number to (printed at, stored at) — the stored instant tells the
    worker's part of a delay."""
    out = {}
    execution = Execution.objects.get(pk=execution_id)
    for line in selectors.attempt_log_tail(execution=execution, attempt=1, n=1000):
        m = LINE.match(line.text)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), line.at.timestamp())
    return out


def test_a_printing_command_is_on_its_page_within_a_second_of_each_line(
    new_page: Any, tenant: Tenant, admin_principal: Principal, platform: dict[str, Proc]
) -> None:
    name = f"ticker-{uuid.uuid4().hex[:8]}"
    ManagedCommand.objects.create(name=name, argv=["/bin/sh", "-c", SCRIPT], timeout_s=120)
    schedule = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "ticker",
            "cron": "0 0 1 1 *",
            "target": {"type": "command", "command": name, "args": {}, "timeout_s": 60},
            "retry": ONE_SHOT,
        },
    )
    tenant_services.membership_set(
        tenant=tenant, user=user("vera", password=PW), role=Role.VIEWER, actor=None
    )
    page = new_page()
    login(page, "vera", PW)

    # Run now; the beat admits and publishes it, the worker runs the command.
    execution = services.schedule_trigger(actor=admin_principal, schedule_id=schedule.id)
    eid = str(execution.id)
    page.goto(f"/executions/{eid}/")
    armed_at = page.evaluate(OBSERVE)

    def last_line_shown_or_ended() -> bool:
        shown = page.evaluate(f"() => window.__liveTail.seen['{LINES}'] !== undefined")
        return bool(shown) or state_of(eid) in FINAL

    try:
        # The page while the command still runs (its last line shown): the screenshot.
        wait_for(last_line_shown_or_ended, timeout=60, interval=0.2, what="the last line")
        shot(page, "47-live-log-tail-running")
        wait_for(lambda: state_of(eid) in FINAL, timeout=30, what="the command to end")
    except Exception:  # pragma: no cover - show what the processes said
        print(
            platform["beat"].output()[-3000:], platform["worker"].output()[-3000:], file=sys.stderr
        )
        raise
    ended = Execution.objects.get(pk=eid)
    assert ended.state == "succeeded", f"{ended.state}: {ended.error}"
    seen = page.evaluate("() => window.__liveTail.seen")

    printed = _printed(eid)
    assert sorted(printed) == list(range(1, LINES + 1)), "the worker stored every line"
    # The lines printed after the page was watching: each measured from its own print.
    measured = {n: at for n, at in printed.items() if at[0] > armed_at}
    assert len(measured) >= MIN_MEASURED, (
        f"only {len(measured)} lines printed after the page was open (armed at {armed_at})"
    )
    report = []
    late = []
    for n, (at, stored) in sorted(measured.items()):
        record = seen.get(str(n))
        if record is None:
            late.append(f"line-{n}: never shown")
            continue
        delay = record["shown"] - at
        report.append(delay)
        if delay > MAX_DELAY_S or not record["running"] or not record["inView"]:
            late.append(
                f"line-{n}: shown {delay:.3f} s after it was printed "
                f"(stored in {stored - at:.3f} s), running={record['running']}, "
                f"in view={record['inView']}"
            )
    if report:
        print(
            f"\n{len(report)} lines measured: per-line delay max {max(report):.3f} s, "
            f"median {statistics.median(report):.3f} s",
            file=sys.stderr,
        )
    assert not late, f"{len(late)} of {len(measured)} lines late or not while running:\n" + (
        "\n".join(late)
    )
