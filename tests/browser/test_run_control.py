"""Run control in Chromium: cancel a running HTTP call and re-run it with an
edited payload from the execution page (a real beat and worker run it; the
target sees attempt 2 with the same X-Scheduled-For), a viewer who sees why
the buttons are off; a backfill's dry run, then the run, with its progress
polled without taking the keyboard focus from the form; and a bulk pause from
the schedule list, reviewed before it is done."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dispatch import services
from dispatch.models import Backfill, Execution, ExecutionState, Operation, Schedule
from tenants import services as tenant_services
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, bulk_schedules, db_now, principal_of, user
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import beat_and_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-3"
HOLD_S = 20.0  # the first attempt's call hangs this long: it is cancelled while in flight


class People:
    def __init__(self) -> None:
        self.tenant: Tenant = tenant_services.tenant_create(slug="billing", name="Billing")
        self.olga = user("olga", password=PW)
        self.vera = user("vera", password=PW)
        tenant_services.membership_set(
            tenant=self.tenant, user=self.olga, role=Role.OPERATOR, actor=None
        )
        tenant_services.membership_set(
            tenant=self.tenant, user=self.vera, role=Role.VIEWER, actor=None
        )
        self.olga_p: Principal = principal_of(self.olga, self.tenant, Role.OPERATOR)


@pytest.fixture
def people(transactional_db: Any) -> People:
    return People()


@pytest.fixture
def platform(people: People, ledger: Ledger, tmp_path: Path) -> Iterator[dict[str, Proc]]:
    """A real beat and a real Celery worker on the live server's database."""
    with beat_and_worker(tmp_path, ledger, beat_name="rc-beat", worker_name="rcw") as procs:
        yield procs


def _hang_first_attempt(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    if req["headers"].get("X-Attempt") == "1":
        time.sleep(HOLD_S)
    return 200, {}, b"ok"


def _wait_state(page: Any, badge: str, platform: dict[str, Proc], timeout: float = 45_000) -> None:
    try:
        page.locator(f"#execution-state .badge-{badge}").wait_for(timeout=timeout)
    except Exception:  # pragma: no cover - show what the processes said
        print(
            platform["beat"].output()[-3000:], platform["worker"].output()[-3000:], file=sys.stderr
        )
        raise


def test_cancel_a_running_call_then_rerun_it_with_an_edited_payload(
    new_page: Any, people: People, ledger: Ledger, platform: dict[str, Proc], settings: Any
) -> None:
    ledger.respond = _hang_first_attempt
    # The web process validates the re-run's edited target like a saved one: let it
    # (and the schedule) name this loopback receiver, as the worker may call it.
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    target = {
        "type": "http",
        "url": f"{ledger.url}/hook",
        "method": "POST",
        "body": {"full": True},
        "timeout_s": 60,
    }
    s = services.schedule_create(
        actor=people.olga_p, data={"name": "sync", "cron": "0 0 1 1 *", "target": target}
    )
    execution = services.schedule_trigger(actor=people.olga_p, schedule_id=s.id)
    url = f"/executions/{execution.id}/"

    # A viewer sees both buttons off, and why.
    viewer = new_page()
    login(viewer, "vera", PW)
    viewer.goto(url)
    assert viewer.locator("#cancel-execution").is_disabled()
    assert viewer.locator("#rerun-execution").is_disabled()
    assert "need the operator role; you are viewer" in viewer.locator("#control-why").inner_text()

    page = new_page()
    login(page, "olga", PW)
    page.goto(url)
    _wait_state(page, "run", platform)  # the call is in flight (the page polls)
    wait_for(lambda: len(ledger.requests) == 1, timeout=30, what="the call reached the target")
    page.locator("#cancel-execution").click()
    page.get_by_role("heading", name=re.compile("Cancel this execution")).wait_for()
    effect = page.locator("#cancel-effect").inner_text()
    assert "token is bumped" in effect and "may already have reached the target" in effect
    shot(page, "40-cancel-confirm")
    page.get_by_label(re.compile("Why")).fill("deploy freeze")
    page.get_by_role("button", name="Cancel execution").click()
    page.wait_for_url(re.compile(r"/executions/[0-9a-f-]+/$"))  # no message in the address
    assert page.locator("#messages").inner_text() == "Cancelled."
    state = page.locator("#execution-state").inner_text()
    assert "cancelled" in state and "deploy freeze" in state
    row = Execution.objects.get(pk=execution.pk)
    assert row.state == ExecutionState.CANCELLED and row.attempt == 1
    scheduled_for = ledger.requests[0]["headers"]["X-Scheduled-For"]

    # Re-run it: attempt 2, a new token, the same occurrence; this run's body edited.
    page.locator("#rerun-execution").click()
    page.get_by_role("heading", name=re.compile("Re-run this execution")).wait_for()
    effect = page.locator("#rerun-effect").inner_text()
    assert "attempt 2" in effect and f"new fencing token ({row.fencing_token + 1})" in effect
    payload = page.get_by_label(re.compile("Payload"))
    assert json.loads(payload.input_value()) == {"full": True}, "prefilled with the schedule's"
    payload.fill('{"full": false, "replay": true}')
    shot(page, "41-rerun-confirm")
    page.get_by_role("button", name="Re-run as attempt 2").click()
    page.wait_for_url(re.compile(r"/executions/[0-9a-f-]+/$"))
    _wait_state(page, "ok", platform)
    assert "Target of this run" in page.locator("main").inner_text()
    shot(page, "42-rerun-succeeded")
    second = [r for r in ledger.requests if r["headers"].get("X-Attempt") == "2"]
    assert len(second) == 1, ledger.dump()
    assert json.loads(second[0]["body"]) == {"full": False, "replay": True}
    assert second[0]["headers"]["X-Scheduled-For"] == scheduled_for
    assert second[0]["headers"]["X-Execution-Id"] == str(execution.id)
    assert int(second[0]["headers"]["X-Fencing-Token"]) > row.fencing_token
    schedule = Schedule.objects.get(pk=s.pk)
    assert schedule.target["body"] == {"full": True}, "the schedule keeps its own payload"
    assert AuditEvent.objects.filter(action="execution.rerun", actor_label="user:olga").exists()


def test_backfill_dry_run_then_run_with_live_progress_that_keeps_focus(
    new_page: Any, people: People
) -> None:
    s = services.schedule_create(
        actor=people.olga_p,
        data={
            "name": "nightly",
            "cron": "0 3 * * *",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    today = db_now().astimezone(ZoneInfo("Europe/Amsterdam")).date()
    page = new_page()
    login(page, "olga", PW)
    page.goto(f"/schedules/{s.id}/")
    form = page.locator("#backfill-form")
    form.get_by_label(re.compile("From")).fill(f"{today - timedelta(days=8)}T12:00")
    form.get_by_label(re.compile("To")).fill(f"{today - timedelta(days=1)}T12:00")
    form.get_by_label(re.compile("At most")).fill("3")
    page.locator("#backfill-dry-run").click()
    plan = page.locator("#plan-table")
    plan.wait_for()
    # Seven nights, each to be created: one line says so, the confirm button right
    # after it, then every occurrence (a short list, open).
    assert plan.locator("tbody tr").count() == 7
    assert plan.locator("tbody tr", has_text="create").count() == 7
    assert page.locator("#backfill-confirm").inner_text() == "Run backfill: 7 to run"
    assert page.locator("#plan-spans li").count() == 1
    assert "#1-7 (7)" in page.locator("#plan-spans").inner_text()
    assert not Backfill.objects.exists(), "a dry run writes nothing"
    shot(page, "43-backfill-dry-run")
    page.locator("#backfill-confirm").click()
    page.wait_for_url(re.compile(r"/schedules/[0-9a-f-]+/#backfills$"))
    assert page.locator("#messages").inner_text() == "Backfill started: 7 to run."
    backfill = Backfill.objects.get(schedule=s)
    assert len(backfill.plan) == 7 and backfill.max_concurrent == 3
    progress = page.locator(f"#backfill-{backfill.id}")
    assert "0 of 7 released" in progress.inner_text()

    # The progress polls; a user typing a second backfill's range keeps the focus
    # and what they typed (the form is never swapped by the polling).
    page.evaluate(
        """(id) => { window.__swaps = 0; document.body.addEventListener('htmx:afterSettle',
             (e) => { if (e.detail.elt && e.detail.elt.id === id) { window.__swaps += 1; } }); }""",
        f"backfill-{backfill.id}",
    )
    typed = page.locator("#backfill-form").get_by_label(re.compile("At most"))
    typed.fill("")
    typed.press_sequentially("12")
    page.wait_for_function("() => window.__swaps >= 2", timeout=20_000)
    assert page.evaluate("() => document.activeElement.name") == "max_concurrent"
    assert typed.input_value() == "12"
    # Once it is over (here: the pump's counters written as a beat would), the
    # next poll shows it and polling stops.
    Backfill.objects.filter(pk=backfill.pk).update(state="done", position=7, created=7)
    page.locator(f"#backfill-{backfill.id}[data-state=done]").wait_for(timeout=10_000)
    assert progress.get_attribute("hx-trigger") is None
    assert "7 of 7 released" in progress.inner_text()


def test_bulk_pause_from_the_list(new_page: Any, people: People) -> None:
    bulk_schedules(people.tenant, 5, prefix="etl")
    services.schedule_create(
        actor=people.olga_p, data={"name": "keep-running", "cron": "0 0 * * *", "target": TARGET}
    )
    page = new_page()
    login(page, "olga", PW)
    page.goto("/schedules/")
    # Filter the list as typed, then select two rows by their checkboxes.
    page.get_by_label("Search by name").press_sequentially("etl", delay=30)
    page.wait_for_function(
        "() => document.querySelectorAll('#schedule-rows tbody tr').length === 5"
    )
    page.get_by_label("Select etl-0001").check()
    page.get_by_label("Select etl-0003").check()
    assert page.locator("#bulk-selected").inner_text() == "2"
    shot(page, "44-bulk-bar")
    page.locator("#bulk-action").select_option("pause")
    page.locator("#bulk-reason").fill("deploy freeze")
    page.locator("#bulk-review").click()
    page.get_by_role("heading", name="Pause 2 schedules?").wait_for()
    assert "Pausing 2 schedules" in page.locator("#bulk-preview").inner_text()
    assert not Schedule.objects.filter(paused=True).exists(), "the review changes nothing"
    shot(page, "44-bulk-review-pause")
    page.locator("#bulk-confirm").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]+/$"))
    assert "2 of 2 done" in page.locator("#operation-counts").inner_text()
    assert page.locator("#operation-items tbody tr", has_text="ok").count() == 2
    paused = Schedule.objects.filter(paused=True)
    assert {p.name for p in paused} == {"etl-0001", "etl-0003"}
    assert {p.paused_reason for p in paused} == {"deploy freeze"}

    # All matching the filter: the three others of "etl", not "keep-running".
    page.goto("/schedules/?q=etl")
    page.locator("#bulk-scope-filter").check()
    page.locator("#bulk-action").select_option("pause")
    page.locator("#bulk-reason").fill("deploy freeze")
    page.locator("#bulk-review").click()
    page.get_by_role("heading", name="Pause 5 schedules matching the filter?").wait_for()
    page.locator("#bulk-confirm").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]+/$"))
    assert Schedule.objects.filter(paused=True).count() == 5
    assert not Schedule.objects.get(name="keep-running").paused
    assert Operation.objects.count() == 2
    shot(page, "45-bulk-done")


def test_bulk_rerun_from_the_runs_page_and_the_operation_poll_keeps_focus(
    new_page: Any, people: People, settings: Any
) -> None:
    s = services.schedule_create(
        actor=people.olga_p, data={"name": "nightly", "cron": "0 0 * * *", "target": TARGET}
    )
    for days in (1, 2, 3):
        at = db_now() - timedelta(days=days)
        Execution.objects.create(
            schedule=s, tenant=people.tenant, scheduled_for=at, due_at=at, state="dead"
        )
    services.schedule_trigger(actor=people.olga_p, schedule_id=s.id)  # one not final
    # Larger than this is left to the beats' control pump (none runs here), so the
    # operation stays running and its page keeps polling.
    settings.BULK_SYNC_MAX = 1
    page = new_page()
    login(page, "olga", PW)
    page.goto("/runs/")
    page.locator("#f-state").select_option("dead")
    page.locator("#f-apply").click()
    page.wait_for_function(
        "() => document.querySelectorAll('#runs-table tbody tr[data-execution-id]').length === 3"
    )
    # The rows swapped in by the filter belong to the bulk bar (form="runs-bulk-form").
    boxes = page.locator("#runs-table input[name=ids]")
    boxes.nth(0).check()
    boxes.nth(2).check()
    assert page.locator("#runs-bulk-selected").inner_text() == "2"
    page.locator("#runs-bulk-action").select_option("rerun")
    page.locator("#runs-bulk-review").click()
    page.get_by_role("heading", name="Re-run 2 executions?").wait_for()
    page.locator("#bulk-confirm").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]+/$"))
    operation = Operation.objects.get()
    assert operation.total == 2 and operation.state == "running"
    shot(page, "46-bulk-runs-running")

    # The progress region polls; a keyboard user on an item's link stays there.
    page.evaluate(
        """() => { window.__swaps = 0; document.body.addEventListener('htmx:afterSettle',
             (e) => { if (e.detail.elt && e.detail.elt.id === 'operation-progress') { window.__swaps += 1; } }); }"""
    )
    page.locator("#item-1").focus()
    page.wait_for_function("() => window.__swaps >= 2", timeout=20_000)
    assert page.evaluate("() => document.activeElement.id") == "item-1"
    # Stop it: the rest is left alone and the polling ends.
    page.locator("#cancel-operation").click()
    page.locator("#operation-state[data-state=cancelled]").wait_for()
    assert page.locator("#operation-progress").get_attribute("hx-trigger") is None
    assert page.locator("#operation-items tbody tr", has_text="cancelled").count() == 2
    assert all(e.reruns == 0 for e in Execution.objects.filter(schedule=s, state="dead"))
