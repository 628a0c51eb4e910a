"""The console in a real browser: log in, create a schedule watching the live
preview, pause and read the explainer, trigger now and watch a real beat and
worker run it, revoke a token, and a viewer who cannot trigger."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants import services as tenant_services
from tenants.models import AuditEvent, ServiceToken, Tenant
from tenants.roles import Principal, Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user
from tests.support.ledger import Ledger, Respond
from tests.support.procs import Proc
from tests.support.rows import execution_row
from tests.support.worker_support import beat_and_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-1"


class People:
    def __init__(self) -> None:
        self.tenant: Tenant = tenant_services.tenant_create(slug="billing", name="Billing")
        self.alice = user("alice", password=PW)
        self.vera = user("vera", password=PW)
        self.root = user("root", password=PW, staff=True)
        tenant_services.membership_set(
            tenant=self.tenant, user=self.alice, role=Role.ADMIN, actor=None
        )
        tenant_services.membership_set(
            tenant=self.tenant, user=self.vera, role=Role.VIEWER, actor=None
        )
        self.alice_p: Principal = principal_of(self.alice, self.tenant, Role.ADMIN)


@pytest.fixture
def people(transactional_db: Any) -> People:
    return People()


def test_log_in_and_create_a_schedule_watching_the_preview(new_page: Any, people: People) -> None:
    page = new_page()
    login(page, "alice", PW)
    shot(page, "01-dashboard-empty")
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name").fill("weekday-report")
    cron = page.get_by_label("Cron")
    cron.press_sequentially("0 9 * * 1-5", delay=40)
    preview = page.locator("#preview")
    preview.get_by_text("At 09:00 AM, Monday through Friday").wait_for()
    assert preview.locator("tbody tr").count() == 10
    # Typing on changes the preview: now every day at 02:30 in Amsterdam.
    cron.fill("")
    cron.press_sequentially("30 2 * * *", delay=40)
    preview.get_by_text("At 02:30 AM").wait_for()
    timezone = page.get_by_label("Timezone")
    timezone.fill("")
    timezone.press_sequentially("Asia/Tokyo", delay=20)
    preview.get_by_text("Asia/Tokyo").first.wait_for()
    assert re.search(r"02:30:00 JST", preview.inner_text())
    # A mistake is shown as typed, naming the field, before anything is saved.
    cron.fill("")
    cron.press_sequentially("0 25 * * *", delay=20)
    preview.get_by_text("Not valid yet").wait_for()
    assert "cron:" in preview.inner_text()
    cron.fill("")
    cron.press_sequentially("0 9 * * 1-5", delay=20)
    preview.get_by_text("At 09:00 AM, Monday through Friday").wait_for()
    shot(page, "02-schedule-form-live-preview")
    page.get_by_role("button", name="Create schedule").click()
    page.get_by_role("heading", name=re.compile("weekday-report")).wait_for()
    s = Schedule.objects.get(name="weekday-report")
    assert s.cron == "0 9 * * 1-5" and s.timezone == "Asia/Tokyo" and s.created_by == "user:alice"
    assert AuditEvent.objects.filter(action="schedule.create", object_id=str(s.id)).exists()
    # The browser said it is in Amsterdam (console.js cookie): times render in CET/CEST.
    page.reload()
    assert re.search(r"\d\d:\d\d:\d\d(\.\d+)? CES?T", page.locator("main").inner_text())
    shot(page, "03-schedule-detail")
    page.get_by_role("link", name="Schedules", exact=True).click()
    shot(page, "04-schedules-list")


def test_pause_then_the_explainer_answers_for_a_skipped_occurrence(
    new_page: Any, people: People
) -> None:
    s = services.schedule_create(
        actor=people.alice_p,
        data={
            "name": "hourly-sync",
            "cron": "0 * * * *",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    # Recorded history: yesterday the schedule was paused for a deploy freeze and,
    # on resuming, the beat recorded the missed 09:00 as skipped by the misfire policy.
    nine = (datetime.now(UTC) - timedelta(days=1)).replace(
        hour=8, minute=0, second=0, microsecond=0
    )
    # Its next run an hour or more away: no occurrence falls due while the test pauses
    # it, even when the test runs at the top of an hour (CI once made it at 15:00:00).
    later = (datetime.now(UTC) + timedelta(minutes=2)).replace(minute=0, second=0, microsecond=0)
    Schedule.objects.filter(pk=s.pk).update(
        created_at=nine - timedelta(days=2), next_run_at=later + timedelta(hours=1)
    )
    for kind, action, at, msg in (
        (
            "paused",
            "schedule.pause",
            nine - timedelta(minutes=5),
            'paused by user:bob ("deploy freeze")',
        ),
        (
            "resumed",
            "schedule.resume",
            nine + timedelta(hours=1, minutes=10),
            "resumed by user:bob",
        ),
    ):
        ExecutionEvent.objects.create(
            tenant=people.tenant,
            schedule=s,
            kind=kind,
            message=msg,
            at=at,
            actor="user:bob",
            data={"reason": "deploy freeze"} if kind == "paused" else {},
        )
        AuditEvent.objects.create(
            tenant=people.tenant,
            at=at,
            actor_kind="user",
            actor_label="user:bob",
            action=action,
            object_type="schedule",
            object_id=str(s.id),
        )
    skipped = execution_row(
        s,
        nine,
        state="skipped",
        reason_code="misfire",
        reason="skipped by misfire policy (skip): the occurrence was found 1h10m late, beyond the 60s grace period",
    )
    page = new_page()
    login(page, "alice", PW)
    page.goto(f"/schedules/{s.id}/")
    page.get_by_text("Pause…").click()
    page.get_by_label("Reason").fill("quarterly close")
    page.get_by_role("button", name="Pause", exact=True).click()
    page.get_by_text("Paused.").wait_for()
    assert "Paused by alice" in page.locator("main").inner_text()
    assert "quarterly close" in page.locator("main").inner_text()
    assert "Nothing was missed while paused" in page.locator("#resume-plan").inner_text()
    # Let the pause have lasted three hours: the page says what resuming would do.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    Schedule.objects.filter(pk=s.pk).update(next_run_at=hour - timedelta(hours=2))
    page.reload()
    plan = page.locator("#resume-plan").inner_text()
    assert re.search(
        r"Resuming now will run \d occurrences? and skip \d \(misfire policy: skip", plan
    ), plan
    shot(page, "05-schedule-paused-resume-plan")
    # The skipped occurrence in the history links to the explainer.
    row = page.locator("tr", has=page.locator(f'a[href="/executions/{skipped.id}/"]'))
    row.get_by_role("link", name="why?").click()
    answer = page.locator("#answer")
    answer.wait_for()
    assert page.locator("#answer-code").get_attribute("data-code") == "paused"
    assert page.locator("#answer-code").inner_text() == "Paused"
    sentence = page.locator("#answer-sentence").inner_text()
    assert "paused by bob at" in sentence and '("deploy freeze")' in sentence
    assert "the misfire policy (skip) recorded this occurrence as skipped" in sentence
    assert answer.locator(f'a[href="/executions/{skipped.id}/"]').count() == 1
    shot(page, "06-explainer-paused-skipped")
    # And the same answer over the API.
    s.refresh_from_db()
    assert s.paused and s.paused_reason == "quarterly close"


@pytest.fixture(scope="module")
def ledger_respond() -> Respond:
    return lambda req: (200, {"Content-Type": "text/plain"}, b'<b hx-get="/x">done</b>')


@pytest.fixture
def platform(people: People, ledger: Ledger, tmp_path: Path) -> Iterator[dict[str, Proc]]:
    """A real beat and a real Celery worker on the live server's database."""
    with beat_and_worker(tmp_path, ledger, beat_name="browser-beat", worker_name="bw") as procs:
        yield procs


def test_trigger_now_and_watch_the_execution_succeed(
    new_page: Any, people: People, ledger: Ledger, platform: dict[str, Proc]
) -> None:
    s = services.schedule_create(
        actor=people.alice_p,
        data={"name": "run-me", "cron": "0 0 1 1 *", "target": TARGET},
    )
    # Loopback receivers cannot pass the save-time SSRF check (by design): point the
    # stored target at the test receiver afterwards, as a DNS change would.
    Schedule.objects.filter(pk=s.pk).update(
        target={"type": "http", "url": f"{ledger.url}/hook", "method": "POST", "timeout_s": 10}
    )
    page = new_page()
    login(page, "alice", PW)
    page.goto(f"/schedules/{s.id}/")
    page.get_by_role("button", name="Trigger now").click()
    page.wait_for_url(re.compile(r"/executions/[0-9a-f-]+/$"))
    execution_id = page.locator("#execution-id").inner_text()
    state = page.locator("#execution-state")
    try:
        page.locator("#execution-state .badge-ok").wait_for(timeout=45_000)
    except Exception:  # pragma: no cover - show what the processes said
        print(
            platform["beat"].output()[-3000:], platform["worker"].output()[-3000:], file=sys.stderr
        )
        raise
    assert "succeeded" in state.inner_text()
    main = page.locator("main").inner_text()
    assert "claimed by worker" in main and "attempt 1 succeeded" in main
    # The target's response is shown as text, never as live markup.
    assert page.locator("main b[hx-get]").count() == 0
    assert any(r["headers"].get("X-Execution-Id") == execution_id for r in ledger.requests)
    shot(page, "07-execution-succeeded")
    # It appears on the schedule's history with its badge.
    page.goto(f"/schedules/{s.id}/")
    assert page.locator(f'a[href="/executions/{execution_id}/"]').count() >= 1
    page.goto("/")
    shot(page, "08-dashboard")


def test_create_then_revoke_a_token(new_page: Any, people: People, live_server: Any) -> None:
    page = new_page()
    login(page, "alice", PW)
    page.get_by_role("link", name="Tokens", exact=True).click()
    page.get_by_label("Name").fill("deploy-bot")
    page.get_by_label("Role").select_option("operator")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#token-secret").inner_text()
    assert secret.startswith("sched_")
    shot(page, "09-token-created")

    def status_with(token: str) -> int:
        req = urllib.request.Request(
            f"{live_server.url}/v1/schedules", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    assert status_with(secret) == 200
    page.goto("/tokens/")
    assert secret not in page.content(), "the secret is shown only once"
    page.get_by_role("link", name="Revoke deploy-bot…").click()
    page.get_by_role("button", name="Revoke").click()
    page.locator("tr", has_text="deploy-bot").get_by_text("revoked").wait_for()
    assert ServiceToken.objects.get(name="deploy-bot").revoked_at is not None
    assert status_with(secret) == 401
    shot(page, "10-tokens")
    page.get_by_role("link", name="Members", exact=True).click()
    shot(page, "11-members")


def test_viewer_has_no_trigger_button_and_a_forged_post_is_403(
    new_page: Any, people: People
) -> None:
    s = services.schedule_create(
        actor=people.alice_p, data={"name": "look-only", "cron": "0 0 * * *", "target": TARGET}
    )
    page = new_page()
    login(page, "vera", PW)
    page.goto(f"/schedules/{s.id}/")
    page.get_by_role("heading", name=re.compile("look-only")).wait_for()
    assert page.get_by_role("button", name="Trigger now").count() == 0
    assert page.get_by_text("Pause…").count() == 0
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"/schedules/{s.id}/trigger", headers={"X-CSRFToken": csrf, "Referer": page.url}
    )
    assert response.status == 403
    assert Execution.objects.filter(schedule=s).count() == 0
    assert AuditEvent.objects.filter(outcome="denied", actor_label="user:vera").exists()
    shot(page, "12-viewer-schedule")


def test_operator_pages_and_audit_for_staff(new_page: Any, people: People) -> None:
    services.schedule_create(
        actor=people.alice_p, data={"name": "audited", "cron": "0 0 * * *", "target": TARGET}
    )
    page = new_page(viewport={"width": 390, "height": 844})  # a phone: the layout must still work
    login(page, "root", PW)
    page.goto("/ops/")
    page.get_by_role("heading", name="Queue depths").wait_for()
    shot(page, "13-ops-overview-mobile")
    page.goto("/ops/audit?action=schedule.")
    assert "schedule.create" in page.locator("main").inner_text()
    shot(page, "14-audit-log-mobile")
    # Keyboard: the skip link is the first stop and lands on the main region.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    assert page.evaluate("document.activeElement.getAttribute('href')") == "#content"
