"""The schedule form fits the kind: the other kind's field and a catch-up limit
under another misfire policy are ignored by the server (they may be shown
when CSS/JS cannot hide them), timeout is a field of its own; the schedule
page shows the target as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import TARGET, World, form_data

pytestmark = pytest.mark.django_db


def test_a_one_off_ignores_a_cron_typed_before_switching_kind(world: World) -> None:
    data = form_data(name="once", kind="once", cron="not a cron", run_at="2031-03-01T10:00")
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    s = Schedule.objects.get(name="once")
    assert s.kind == "once" and s.cron == ""


def test_a_cron_schedule_ignores_a_run_at_typed_before_switching_kind(world: World) -> None:
    data = form_data(name="rec", kind="cron", run_at="garbage")
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    s = Schedule.objects.get(name="rec")
    assert s.kind == "cron" and s.run_at is None


def test_the_catch_up_limit_counts_only_under_catch_up(world: World) -> None:
    client = world.client("operator")
    # Under skip the limit is not used: garbage there is not an error, nor saved.
    response = client.post(
        "/schedules/new", form_data(name="skip", misfire="skip", catch_up_limit="x")
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(name="skip").catch_up_limit == 10
    response = client.post(
        "/schedules/new", form_data(name="cu", misfire="catch_up", catch_up_limit="3")
    )
    assert response.status_code == 302
    assert Schedule.objects.get(name="cu").catch_up_limit == 3
    bad = client.post(
        "/schedules/new", form_data(name="cu2", misfire="catch_up", catch_up_limit="x")
    )
    assert bad.status_code == 400 and 'id="id_catch_up_limit_error"' in bad.content.decode()


def test_the_form_marks_the_fields_of_each_kind_for_hiding(world: World) -> None:
    html = world.client("operator").get("/schedules/new").content.decode()
    assert '<div class="for-cron">' in html and '<div class="for-once">' in html
    assert '<div class="for-catch-up">' in html


def test_timeout_is_its_own_field_and_is_saved(world: World) -> None:
    client = world.client("operator")
    response = client.post("/schedules/new", form_data(name="t", timeout_s="45"))
    assert response.status_code == 302, response.content.decode()[:3000]
    s = Schedule.objects.get(name="t")
    assert s.timeout_s == 45 and s.target["timeout_s"] == 45
    page = client.get(f"/schedules/{s.id}/edit").content.decode()
    assert 'name="timeout_s" value="45"' in page
    # The raw target JSON no longer hides it.
    start = page.index('name="target"')
    assert "timeout_s" not in page[start : page.index("</textarea>", start)]
    bad = client.post("/schedules/new", form_data(name="t2", timeout_s="0"))
    assert bad.status_code == 400 and 'id="id_timeout_s_error"' in bad.content.decode()


def test_the_schedule_page_shows_the_target_as_json(world: World) -> None:
    target = TARGET | {"headers": {"Authorization": {"secret": "vault:kv/billing/hook#token"}}}
    s = services.schedule_create(
        actor=world.admin_p, data={"name": "j", "cron": "0 0 * * *", "target": target}
    )
    html = world.client("viewer").get(f"/schedules/{s.id}/").content.decode()
    start = html.index('<pre class="json"')
    shown = html[html.index(">", start) + 1 : html.index("</pre>", start)]
    parsed = json.loads(shown.replace("&quot;", '"').replace("&#x27;", "'"))
    assert parsed["headers"]["Authorization"] == {"secret": "vault:kv/billing/hook#token"}
    assert "{'type'" not in shown


def test_the_new_schedule_form_proposes_the_demo_receiver_under_make_run(
    world: World, settings: Any
) -> None:
    # Without a demo receiver: a template naming a service that a user must change.
    page = world.client("operator").get("/schedules/new").content.decode()
    assert "https://service.internal/hook" in page
    # Under `make run` (run_platform sets DEMO_RECEIVER_URL): the receiver, which the
    # SSRF guard lets through, so a newcomer's first schedule succeeds.
    settings.DEMO_RECEIVER_URL = "http://127.0.0.1:9911"
    settings.TARGET_TEST_ALLOW = ["127.0.0.1:9911"]
    page = world.client("operator").get("/schedules/new").content.decode()
    assert "http://127.0.0.1:9911/ok" in page and "service.internal" not in page
    response = world.client("operator").post(
        "/schedules/new",
        form_data(
            name="first",
            target=json.dumps(
                {"type": "http", "url": "http://127.0.0.1:9911/ok", "method": "POST"}
            ),
        ),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(name="first").target["url"] == "http://127.0.0.1:9911/ok"
