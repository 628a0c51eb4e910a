"""What the console pages do: forms and their inline errors, the live preview
(description, resolved H, next runs with DST notes, the before/after diff),
pause / resume / trigger / delete through the audited services, tokens,
members, the dashboard, execution timelines, operator views and time zones."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dispatch import services
from dispatch.models import BeatNode, Execution, ExecutionEvent, Schedule, SchedulerPartition
from tenants.models import AuditEvent, Membership, ServiceToken
from tenants.services import MEMBER_ADD_REFUSED
from tests.support.console_support import World, form_data, text, user

pytestmark = pytest.mark.django_db


# --- schedules: create, edit, inline errors ------------------------------------------------


def test_create_schedule_through_the_form_is_audited(world: World) -> None:
    response = world.client("operator").post("/schedules/new", form_data(name="weekday-report"))
    assert response.status_code == 302
    s = Schedule.objects.get(name="weekday-report")
    assert response["Location"] == f"/schedules/{s.id}/"
    assert (
        s.cron == "0 9 * * 1-5" and s.timezone == "Europe/Amsterdam" and s.created_by == "user:olga"
    )
    audit = AuditEvent.objects.get(action="schedule.create", object_id=str(s.id))
    assert audit.actor_label == "user:olga"


@pytest.mark.parametrize(
    "overrides,field,message",
    [
        ({"cron": "61 * * * *"}, "cron", "cron: "),
        ({"timezone": "Mars/Olympus"}, "timezone", "timezone: "),
        ({"target": "{not json"}, "target", "target: is not valid JSON"),
        ({"target": '{"type": "http", "url": "http://127.0.0.1/x"}'}, "target", "target.url: "),
        ({"target": '{"type": "ftp"}'}, "target", "target.type: must be one of"),
        ({"retry_max_attempts": "0"}, "retry_max_attempts", "retry.max_attempts: "),
        ({"jitter_s": "99999"}, "jitter_s", "jitter_s: must be a whole number"),
        ({"name": "nightly"}, "name", "name: a schedule with this name already exists"),
        ({"kind": "once", "run_at": ""}, "run_at", "run_at: is required"),
        ({"cron": ""}, "cron", "cron: is required"),
    ],
)
def test_form_errors_are_inline_and_name_the_field(
    world: World, overrides: dict[str, str], field: str, message: str
) -> None:
    before = Schedule.objects.count()
    response = world.client("operator").post("/schedules/new", form_data(**overrides))
    assert response.status_code == 400
    html = text(response)
    # Django puts the error list right before the widget of the field, with aria-invalid.
    block = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert message in block.group(1)
    assert 'aria-invalid="true"' in html
    assert Schedule.objects.count() == before


def test_one_off_job_is_read_in_the_schedules_zone(world: World) -> None:
    data = form_data(
        name="once", kind="once", cron="", run_at="2031-03-01T10:00", timezone="Asia/Tokyo"
    )
    assert world.client("operator").post("/schedules/new", data).status_code == 302
    s = Schedule.objects.get(name="once")
    assert s.kind == "once" and s.run_at == datetime(2031, 3, 1, 1, 0, tzinfo=UTC)


def test_edit_saves_a_new_version_and_a_stale_version_is_refused(world: World) -> None:
    client = world.client("operator")
    sid = world.schedule.id
    page = text(client.get(f"/schedules/{sid}/edit"))
    # The specs field is a textarea, one spec per line.
    assert (
        re.search(r'name="cron"[^>]*>\s*0 0 \* \* \*</textarea>', page) and 'name="version"' in page
    )
    response = client.post(
        f"/schedules/{sid}/edit", form_data(name="nightly", cron="15 1 * * *", version="1")
    )
    assert response.status_code == 302
    world.schedule.refresh_from_db()
    assert world.schedule.cron == "15 1 * * *" and world.schedule.version == 2
    stale = client.post(
        f"/schedules/{sid}/edit", form_data(name="nightly", cron="0 2 * * *", version="1")
    )
    assert stale.status_code == 400 and "schedule was changed concurrently" in text(stale)
    assert AuditEvent.objects.filter(action="schedule.update", object_id=str(sid)).count() == 1


# --- live preview ------------------------------------------------------------------------------


def test_preview_describes_and_lists_the_next_ten_in_zone_and_utc(world: World) -> None:
    response = world.client("operator").post(
        "/schedules/preview", form_data(), HTTP_HX_REQUEST="true"
    )
    html = text(response)
    assert response.status_code == 200
    assert "At 09:00 AM, Monday through Friday" in html
    assert html.count('<tr class="">') == 10
    assert re.search(r"\d{4}-\d\d-\d\d 09:00:00 CE[S]?T", html)
    assert re.search(r"\d{4}-\d\d-\d\d 0[78]:00:00 UTC", html)
    assert "<html" not in html, "an htmx swap gets the partial only"


def test_preview_resolves_h_and_marks_it_provisional_before_saving(world: World) -> None:
    html = text(world.client("operator").post("/schedules/preview", form_data(cron="H H * * *")))
    assert "Resolved: <code>" in html and "H values are fixed per schedule" in html


def issued_seed(client: Any) -> str:
    """The preview seed the create form was given by the server."""
    page = text(client.get("/schedules/new"))
    found = re.search(r'name="preview_seed" value="([^"]+)"', page)
    assert found is not None, "the create form carries a server-issued preview seed"
    return found.group(1)


def test_saved_schedule_keeps_the_h_values_its_preview_showed(world: World) -> None:
    from console.forms import read_seed
    from dispatch.timing import cron

    client = world.client("operator")
    seed = issued_seed(client)
    data = form_data(cron="H H * * *", name="hashed", preview_seed=seed)
    preview = text(client.post("/schedules/preview", data))
    shown = re.search(r"Resolved: <code>([^<]+)</code>", preview)
    assert shown is not None
    assert client.post("/schedules/new", data).status_code == 302
    saved = Schedule.objects.get(name="hashed")
    assert saved.id == read_seed(seed)
    assert cron.resolve(saved.cron, seed=str(saved.id)) == shown.group(1)
    # Submitting the same form again cannot reuse the id (nor reveal anything about it).
    again = client.post("/schedules/new", data | {"name": "hashed-2"})
    assert again.status_code == 400 and "already submitted" in text(again)
    assert Schedule.objects.filter(name="hashed-2").count() == 0


def test_preview_seed_is_not_an_oracle_nor_a_choice_of_id(world: World) -> None:
    """A client-made seed (another tenant's schedule id, or an id picked for its
    partition) is refused with one answer, and never becomes a schedule's id."""
    import uuid

    from console import forms as console_forms

    client = world.client("operator")
    theirs = str(world.other_schedule.id)
    picked = str(uuid.uuid4())
    answers = []
    for n, seed in enumerate((theirs, picked, issued_seed(client) + "x")):
        res = client.post("/schedules/new", form_data(name=f"forged-{n}", preview_seed=seed))
        answers.append((res.status_code, re.findall(r'role="alert"><p>([^<]+)</p>', text(res))))
    assert answers == [(400, [f"preview_seed: {console_forms.SEED_INVALID}"])] * 3
    assert not Schedule.objects.filter(name__startswith="forged-").exists()
    assert not Schedule.objects.filter(id=picked).exists()
    # The live preview does not compute with a client-made seed either.
    preview = text(client.post("/schedules/preview", form_data(preview_seed=theirs)))
    assert console_forms.SEED_INVALID in preview


def test_an_expired_preview_seed_asks_for_a_reload(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console import forms as console_forms

    client = world.client("operator")
    seed = issued_seed(client)
    monkeypatch.setattr(console_forms, "SEED_MAX_AGE_S", -1)
    res = client.post("/schedules/new", form_data(name="stale", preview_seed=seed))
    assert res.status_code == 400 and console_forms.SEED_INVALID in text(res)


def test_preview_shows_dst_notes(world: World) -> None:
    data = form_data(cron="30 2 * * *", timezone="Europe/Amsterdam")
    client = world.client("operator")
    html = text(client.post("/schedules/preview", data))
    # The next spring-forward day may be months away; its note shows when the
    # ten runs reach it, so ask for a daily 02:30 starting just before one.
    assert "Not valid yet" not in html
    from dispatch.timing import cron

    notes = [
        o.note
        for o in cron.preview(
            "30 2 * * *",
            "Europe/Amsterdam",
            seed="x",
            after=datetime(2026, 3, 27, tzinfo=UTC),
            count=5,
        )
        if o.note
    ]
    assert notes and "02:30 does not exist on 2026-03-29" in notes[0]


def test_preview_errors_name_the_field(world: World) -> None:
    html = text(world.client("operator").post("/schedules/preview", form_data(cron="0 25 * * *")))
    assert "Not valid yet" in html and "cron:" in html and "hour" in html


def test_edit_preview_shows_the_before_after_diff(world: World) -> None:
    sid = world.schedule.id
    html = text(
        world.client("operator").post(
            f"/schedules/{sid}/preview", form_data(name="nightly", cron="0 12 * * *")
        )
    )
    assert "Upcoming fire times change with this edit" in html
    assert html.count('<tr class="added">') == 10
    assert html.count('<tr class="removed">') >= 9
    same = text(
        world.client("operator").post(
            f"/schedules/{sid}/preview",
            form_data(name="nightly", cron="0 0 * * *", timezone="Europe/Amsterdam"),
        )
    )
    assert "change with this edit" not in same


# --- actions -------------------------------------------------------------------------------------


def test_pause_with_reason_and_until_then_resume_shows_the_misfire_plan(world: World) -> None:
    client = world.client("operator")
    sid = world.schedule.id
    until = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = client.post(f"/schedules/{sid}/pause", {"reason": "deploy freeze", "until": until})
    assert response.status_code == 302
    world.schedule.refresh_from_db()
    assert world.schedule.paused and world.schedule.paused_reason == "deploy freeze"
    assert world.schedule.paused_until is not None and world.schedule.paused_by == "user:olga"
    # Pretend the pause lasted: three daily midnights were missed (misfire skip). The
    # first is the Amsterdam midnight two local days before the latest one, whatever the
    # time of day (23:00 UTC is midnight there: "now - 3 days" counted 4 after it).
    zone = ZoneInfo("Europe/Amsterdam")
    latest = datetime.now(zone).replace(hour=0, minute=0, second=0, microsecond=0)
    first = datetime.combine(latest.date() - timedelta(days=2), time(0), tzinfo=zone)
    Schedule.objects.filter(pk=sid).update(next_run_at=first.astimezone(UTC))
    page = text(client.get(f"/schedules/{sid}/"))
    assert "Resuming now will run 0 occurrences and skip 3 (misfire policy: skip" in page
    Schedule.objects.filter(pk=sid).update(misfire="run_once")
    page = text(client.get(f"/schedules/{sid}/"))
    assert "Resuming now will run 1 occurrence and skip 2 (misfire policy: run_once" in page
    response = client.post(f"/schedules/{sid}/resume", follow=True)
    assert response.redirect_chain == [(f"/schedules/{sid}/", 302)]
    assert "Resumed. Resuming now will run 1 occurrence" in text(response)
    world.schedule.refresh_from_db()
    assert not world.schedule.paused
    actions = set(AuditEvent.objects.filter(object_id=str(sid)).values_list("action", flat=True))
    assert {"schedule.pause", "schedule.resume"} <= actions
    # Resuming again (a double click, a stale page) changes nothing and says so.
    audits = AuditEvent.objects.filter(object_id=str(sid)).count()
    again = client.post(f"/schedules/{sid}/resume", follow=True)
    assert "It was not paused: nothing changed." in text(again)
    assert AuditEvent.objects.filter(object_id=str(sid)).count() == audits


def test_pause_until_in_the_past_is_an_error_not_a_500(world: World) -> None:
    response = world.client("operator").post(
        f"/schedules/{world.schedule.id}/pause", {"reason": "x", "until": "2001-01-01T00:00"}
    )
    assert response.status_code == 400 and "until: must be in the future" in text(response)
    response = world.client("operator").post(
        f"/schedules/{world.schedule.id}/pause", {"until": "soon"}
    )
    assert response.status_code == 400 and "until:" in text(response)


def test_trigger_now_creates_a_manual_execution_and_shows_it(world: World) -> None:
    client = world.client("operator")
    response = client.post(f"/schedules/{world.schedule.id}/trigger")
    assert response.status_code == 302
    execution = Execution.objects.filter(schedule=world.schedule).order_by("-created_at").first()
    assert execution is not None and execution.trigger == "manual"
    assert response["Location"] == f"/executions/{execution.id}/"
    assert AuditEvent.objects.filter(action="schedule.trigger", actor_label="user:olga").exists()


def test_delete_asks_first_then_soft_deletes(world: World) -> None:
    client = world.client("operator")
    sid = world.schedule.id
    assert "Delete <em>nightly</em>?" in text(client.get(f"/schedules/{sid}/delete"))
    assert Schedule.objects.get(pk=sid).deleted_at is None
    assert client.post(f"/schedules/{sid}/delete").status_code == 302
    assert Schedule.objects.get(pk=sid).deleted_at is not None
    assert client.get(f"/schedules/{sid}/").status_code == 404
    assert AuditEvent.objects.filter(action="schedule.delete", object_id=str(sid)).exists()


# --- lists and details ---------------------------------------------------------------------------


def test_schedule_list_searches_and_filters(world: World) -> None:
    client = world.client("viewer")
    from dispatch import services

    services.schedule_create(
        actor=world.admin_p,
        data={"name": "weekly-invoices", "cron": "0 6 * * 1", "target": world.schedule.target},
    )
    services.schedule_pause(actor=world.admin_p, schedule_id=world.schedule.id)
    html = text(client.get("/schedules/?q=invoice"))
    assert "weekly-invoices" in html and ">nightly<" not in html
    html = text(client.get("/schedules/?status=paused"))
    assert ">nightly<" in html and "weekly-invoices" not in html
    html = text(client.get("/schedules/?status=active"))
    assert "weekly-invoices" in html and ">nightly<" not in html
    partial = text(
        client.get("/schedules/?q=week", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="schedule-rows")
    )
    assert partial.startswith('\n<div id="schedule-rows">') or partial.lstrip().startswith(
        '<div id="schedule-rows">'
    )
    assert "<html" not in partial


def test_schedule_detail_shows_definition_next_runs_history_and_dependencies(world: World) -> None:
    from dispatch import services

    child = services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "child",
            "cron": "0 0 * * *",
            "target": world.schedule.target,
            "depends_on": [str(world.schedule.id)],
        },
    )
    Execution.objects.filter(pk=world.execution.pk).update(state="succeeded", status_code=200)
    html = text(world.client("viewer").get(f"/schedules/{world.schedule.id}/"))
    assert "At 12:00 AM" in html and "Europe/Amsterdam" in html
    assert html.count("<li><time") == 10, "ten next runs"
    assert f"/executions/{world.execution.id}/" in html and "badge-ok" in html
    assert f"/schedules/{child.id}/" in html, "downstream dependency listed"
    child_html = text(world.client("viewer").get(f"/schedules/{child.id}/"))
    assert f"/schedules/{world.schedule.id}/" in child_html, "upstream listed"


def test_history_shows_gaps_linking_to_the_explainer(world: World) -> None:
    Schedule.objects.filter(pk=world.schedule.pk).update(
        created_at=datetime.now(UTC) - timedelta(days=3)
    )
    html = text(world.client("viewer").get(f"/schedules/{world.schedule.id}/"))
    gaps = re.findall(r'href="/explain\?schedule=[^"]+&amp;at_utc=([^"]+)">why not\?</a>', html)
    assert len(gaps) >= 2, "missed midnights show as gaps"
    explained = text(
        world.client("viewer").get(f"/explain?schedule={world.schedule.id}&at_utc={gaps[0]}")
    )
    assert 'data-code="missing"' in explained or 'data-code="pending"' in explained


def test_execution_detail_timeline_merges_row_fields_and_events(world: World) -> None:
    e = world.execution
    now = datetime.now(UTC)
    Execution.objects.filter(pk=e.pk).update(
        state="succeeded",
        enqueued_at=now,
        started_at=now + timedelta(seconds=1),
        finished_at=now + timedelta(seconds=2),
        queue="default.short",
        fencing_token=3,
        lease_owner="w1@host-1",
        log_excerpt="hello from the target",
        status_code=200,
    )
    ExecutionEvent.objects.create(
        tenant=world.tenant,
        schedule=world.schedule,
        execution=e,
        kind="claimed",
        message="claimed by worker w1@host-1 with token 3",
        actor="w1@host-1",
        at=now + timedelta(seconds=1),
    )
    ExecutionEvent.objects.create(
        tenant=world.tenant,
        schedule=world.schedule,
        execution=e,
        kind="fencing_rejected",
        message="the completion of worker w0 (token 2) was rejected",
        at=now + timedelta(seconds=3),
    )
    html = text(world.client("viewer").get(f"/executions/{e.id}/"))
    for piece in (
        "published to queue default.short",
        "claimed by worker w1@host-1 with token 3",
        "was rejected",
        "finished: succeeded",
        "hello from the target",
        f'data-copy="{e.id}"',
        "triggered manually by",
    ):
        assert piece in html, piece
    assert (
        html.index("published to queue")
        < html.index("claimed by worker")
        < html.index("was rejected")
    )
    assert 'hx-trigger="every 2s"' not in html, "a finished execution is not polled"


def test_running_execution_page_polls_its_live_partial(world: World) -> None:
    e = world.execution
    Execution.objects.filter(pk=e.pk).update(state="running")
    client = world.client("viewer")
    assert 'hx-trigger="every 2s"' in text(client.get(f"/executions/{e.id}/"))
    partial = text(
        client.get(f"/executions/{e.id}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="execution-live")
    )
    assert partial.strip().startswith('<section id="execution-live"') and "<html" not in partial


# --- dashboard -------------------------------------------------------------------------------------


def test_dashboard_shows_upcoming_running_failures_and_usage(world: World) -> None:
    from dispatch import services

    soon = services.schedule_create(
        actor=world.admin_p,
        data={"name": "every-minute", "cron": "* * * * *", "target": world.schedule.target},
    )
    # The world's nightly schedule fires at 23:00 UTC in winter: paused, it is not
    # upcoming when the suite runs in the hour before (CI did).
    Schedule.objects.filter(pk=world.schedule.pk).update(paused=True)
    Execution.objects.filter(pk=world.execution.pk).update(
        state="running", started_at=datetime.now(UTC), lease_owner="w9"
    )
    Execution.objects.filter(pk=world.other_execution.pk).update(state="dead")
    dead = Execution.objects.create(
        schedule=world.schedule,
        tenant=world.tenant,
        scheduled_for=datetime.now(UTC) - timedelta(hours=1),
        due_at=datetime.now(UTC) - timedelta(hours=1),
        state="dead",
        error="HTTP 500 from target",
    )
    client = world.client("viewer")
    html = text(client.get("/"))
    # One row for the every-minute schedule, with how many times it fires in the hour.
    assert html.count(f'href="/schedules/{soon.id}/"') == 1
    assert re.search(rf'id="up-{soon.id}".*?<td class="num">(60|61)</td>', html, re.S)
    assert "w9" in html, "running now"
    # Recent lists say how long ago, the absolute time on hover.
    shown = re.search(rf'id="bad-{dead.id}"[^>]*>(<time [^>]*>[^<]*</time>)', html)
    # (an hour before the test's clock: the page's "now" is its transaction's, a moment
    # earlier, so it may still be 59 min)
    assert shown and re.search(r">(1 h|59 min) ago</time>$", shown.group(1)), shown
    assert f"/executions/{dead.id}/" in html and "HTTP 500 from target" in html
    assert "<strong>1</strong> of 10 queued or running" in html
    assert 'hx-trigger="every 5s"' in html
    live = text(client.get("/dashboard/live", HTTP_HX_REQUEST="true"))
    assert live.strip().startswith('<div id="live"') and "<html" not in live
    assert str(world.other_execution.id) not in html, "other tenants' failures are not shown"


# --- tokens and members ------------------------------------------------------------------------------


def test_token_create_list_and_revoke(world: World) -> None:
    client = world.client("admin")
    created = client.post(
        "/tokens/", {"name": "ci", "role": "operator", "expires_at": "2031-01-01T00:00"}
    )
    assert created.status_code == 302 and created["Location"] == "/tokens/"
    token = ServiceToken.objects.get(name="ci")
    assert token.role == "operator" and token.expires_at == datetime(2031, 1, 1, tzinfo=UTC)
    shown = client.get("/tokens/")
    html = text(shown)
    assert f"<code>{token.prefix}…</code>" in html and 'id="token-secret"' in html
    assert shown["Cache-Control"] == "no-store"
    # Shown once: the next GET (a reload) has no secret and made no other token.
    again = text(client.get("/tokens/"))
    assert 'id="token-secret"' not in again
    assert ServiceToken.objects.filter(tenant=world.tenant, name="ci").count() == 1
    confirm = client.get(f"/tokens/{token.pk}/revoke")
    assert confirm.status_code == 200 and "Revoke token" in text(confirm)
    token.refresh_from_db()
    assert token.revoked_at is None, "asking to confirm revokes nothing"
    assert client.post(f"/tokens/{token.pk}/revoke").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "revoked" in text(client.get("/tokens/"))
    assert {"token.create", "token.revoke"} <= set(
        AuditEvent.objects.values_list("action", flat=True)
    )
    bad = client.post(
        "/tokens/", {"name": "late", "role": "viewer", "expires_at": "2001-01-01T00:00"}
    )
    assert bad.status_code == 400 and "expires_at: must be in the future" in text(bad)


def test_members_add_change_and_remove(world: World) -> None:
    client = world.client("admin")
    newbie = user("newbie")
    staff = world.client("staff")
    staff.post("/tenant", {"tenant": "billing"})
    assert staff.post("/members/", {"username": "newbie", "role": "operator"}).status_code == 302
    assert Membership.objects.get(user=newbie, tenant=world.tenant).role == "operator"
    missing = staff.post("/members/", {"username": "nobody", "role": "viewer"})
    assert missing.status_code == 400 and MEMBER_ADD_REFUSED in text(missing)
    assert client.post(f"/members/{newbie.pk}/role", {"role": "admin"}).status_code == 302
    assert Membership.objects.get(user=newbie, tenant=world.tenant).role == "admin"
    confirm = client.get(f"/members/{newbie.pk}/remove")
    assert confirm.status_code == 200 and "Remove <em>newbie</em>" in text(confirm)
    assert Membership.objects.filter(user=newbie, tenant=world.tenant).exists()
    assert client.post(f"/members/{newbie.pk}/remove").status_code == 302
    assert not Membership.objects.filter(user=newbie, tenant=world.tenant).exists()
    assert client.post(f"/members/{world.admin.pk}/remove").status_code == 400, "no self-removal"
    actions = list(
        AuditEvent.objects.filter(action__startswith="member.").values_list("action", flat=True)
    )
    assert {"member.add", "member.role_change", "member.remove"} <= set(actions)


def test_tenant_admins_cannot_attach_accounts_nor_learn_which_exist(world: World) -> None:
    """Another tenant's user, a staff account, an unattached account and an unknown
    name all get the same answer, and nobody is added."""
    client = world.client("admin")
    user("newbie")
    page = text(client.get("/members/"))
    assert "added by platform staff" in page and "Add member" not in page
    answers = set()
    for name in ("oscar", "root", "newbie", "nobody"):
        res = client.post("/members/", {"username": name, "role": "admin"})
        answers.add((res.status_code, tuple(re.findall(r"username: [^<]+", text(res)))))
    assert answers == {(400, (f"username: {MEMBER_ADD_REFUSED}",))}
    assert not Membership.objects.filter(
        tenant=world.tenant, user__username__in=["oscar", "root", "newbie"]
    ).exists()
    denied = AuditEvent.objects.filter(action="member.add", outcome="denied")
    assert sorted(e.after["username"] for e in denied) == ["newbie", "nobody", "oscar", "root"]
    # Staff add existing non-staff accounts; a staff account gets the same refusal.
    staff = world.client("staff")
    staff.post("/tenant", {"tenant": "billing"})
    assert staff.post("/members/", {"username": "oscar", "role": "viewer"}).status_code == 302
    refused = staff.post("/members/", {"username": "root", "role": "viewer"})
    assert refused.status_code == 400 and MEMBER_ADD_REFUSED in text(refused)


# --- time zones -----------------------------------------------------------------------------------------


def test_times_in_the_viewers_zone_with_utc_on_hover(world: World) -> None:
    client = world.client("viewer")
    html = text(client.get(f"/executions/{world.execution.id}/"))
    assert re.search(r'<time datetime="[^"]+Z" title="[^"]+ UTC">[^<]+ UTC</time>', html), (
        "default UTC"
    )
    client.cookies["console_tz"] = "Asia/Tokyo"
    html = text(client.get(f"/executions/{world.execution.id}/"))
    assert re.search(r'title="[^"]+ UTC">[^<]+ JST</time>', html), "browser zone from the cookie"
    client.post("/prefs/tz", {"tz": "America/New_York"})
    html = text(client.get(f"/executions/{world.execution.id}/"))
    assert re.search(r'title="[^"]+ UTC">[^<]+ E[SD]T</time>', html), "the user's setting wins"
    assert re.search(
        r'<small class="muted local-time">\([^()<]+ CES?T, Europe/Amsterdam\)</small>', html
    ), "and the schedule's own time, labelled with its zone"
    # A zone that is none: back on the same page, which says so beside the field (no
    # bare error page), and the setting unchanged.
    page = f"/executions/{world.execution.id}/"
    answer = client.post("/prefs/tz", {"tz": "Nowhere/Special", "next": page}, follow=True)
    assert answer.redirect_chain == [(page, 302)] and answer.status_code == 200
    html = text(answer)
    assert 'id="tz-pref-error" role="alert">“Nowhere/Special” is not a time zone' in html
    assert 'aria-invalid="true" aria-describedby="tz-pref-error"' in html
    assert "<h1>Execution of" in html  # the page itself, with its layout
    assert re.search(r'title="[^"]+ UTC">[^<]+ E[SD]T</time>', html), "the setting is kept"
    html = text(client.get(page))
    assert "tz-pref-error" not in html, "said once"


# --- explainer page -----------------------------------------------------------------------------------------


def test_explainer_page_answers_for_a_time_in_the_schedules_zone(world: World) -> None:
    sid = world.schedule.id
    midnight = datetime(2026, 1, 4, 23, 0, tzinfo=UTC)  # 2026-01-05 00:00 in Amsterdam
    Schedule.objects.filter(pk=sid).update(created_at=midnight - timedelta(days=1))
    e = Execution.objects.create(
        schedule=world.schedule,
        tenant=world.tenant,
        scheduled_for=midnight,
        due_at=midnight,
        state="skipped",
        reason_code="overlap_forbid",
        reason="skipped: previous run x still running (overlap forbid)",
    )
    html = text(world.client("viewer").get(f"/explain?schedule={sid}&at=2026-01-05T00:00"))
    assert 'id="answer-code" data-code="skipped_overlap"' in html
    assert "the schedule forbids overlapping runs" in html
    assert f'href="/executions/{e.id}/"' in html
    bad = world.client("viewer").get(f"/explain?schedule={sid}&at=not-a-time")
    assert bad.status_code == 400 and "at: is not a date and time" in text(bad)
    assert world.client("viewer").get("/explain").status_code == 200


# --- operators ---------------------------------------------------------------------------------------------------


def test_operator_overview_lists_tenants_beats_partitions_queues_lag_and_dead(world: World) -> None:
    BeatNode.objects.create(name="beat-a", hostname="h1", pid=42, partitions=[0, 1], fired_total=7)
    SchedulerPartition.objects.create(number=0, owner="beat-a", epoch=5)
    sched_for = world.execution.scheduled_for
    # A timed (cron) occurrence: manual runs are not part of the fire-lag figure.
    Execution.objects.filter(pk=world.execution.pk).update(
        due_at=sched_for, enqueued_at=sched_for + timedelta(seconds=1), trigger="cron"
    )
    Execution.objects.filter(pk=world.other_execution.pk).update(state="dead", reason="gave up")
    Execution.objects.filter(pk=world.execution.pk).update(
        lease_owner="worker-host:77", started_at=services.db_now(), state="running"
    )
    html = text(world.client("staff").get("/ops/"))
    assert "<td>worker-host:77</td>" in html  # workers are visible by their claims
    for piece in (
        "billing",
        "outsider",
        "beat-a",
        "h1 / 42",
        "0, 1",
        ">5<",
        "high.short",
        "low.long",
        "p50 <strong>1.0 s</strong>",
        "gave up",
    ):
        assert piece in html, piece


def test_queue_depths_say_na_when_the_broker_is_not_redis(world: World, settings: Any) -> None:
    settings.CELERY_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
    html = text(world.client("staff").get("/ops/"))
    assert html.count("<td>n/a</td>") == 6


def test_audit_log_is_searchable_by_actor_tenant_action_and_time(world: World) -> None:
    client = world.client("staff")
    html = text(client.get("/ops/audit?actor=alice&tenant=billing&action=schedule."))
    assert "schedule.create" in html and "schedule.trigger" in html
    assert "user:oscar" not in html
    html = text(client.get("/ops/audit?tenant=outsider"))
    assert "user:oscar" in html and "user:alice" not in html
    html = text(client.get("/ops/audit?since=2100-01-01T00:00"))
    assert "No audit entries match." in html
    assert client.get("/ops/audit?since=garbage").status_code == 400
