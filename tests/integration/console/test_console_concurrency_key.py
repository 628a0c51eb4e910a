"""The schedule form's optional concurrency-key fieldset: saved as the API's
concurrency_key object, shown again on edit, errors inline naming the part, nothing
saved; and the execution page shows why a run was held by a key."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from dispatch.models import ExecutionEvent, Schedule
from tests.support.console_support import World, db_now, form_data
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = '{"type": "http", "url": "https://billing.internal/hook", "body": {"customer_id": 42}}'


def test_form_saves_the_key_and_shows_it_on_edit(world: World) -> None:
    client = world.client("operator")
    data = form_data(
        name="invoices",
        target=TARGET,
        ckey_key="customer-{target.body.customer_id}",
        ckey_limit="2",
        ckey_on_conflict="skip",
    )
    response = client.post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    s = Schedule.objects.get(name="invoices")
    assert s.concurrency_key == {
        "key": "customer-{target.body.customer_id}",
        "limit": 2,
        "on_conflict": "skip",
        "rendered": "customer-42",
    }
    page = client.get(f"/schedules/{s.id}/edit").content.decode()
    assert 'value="customer-{target.body.customer_id}"' in page
    assert re.search(r'<option value="skip" selected>', page)
    # An empty key removes it.
    edit = form_data(name="invoices", target=TARGET, ckey_key="", version=str(s.version))
    assert client.post(f"/schedules/{s.id}/edit", edit).status_code == 302
    s.refresh_from_db()
    assert s.concurrency_key is None


def test_a_form_without_the_fieldset_saves_no_key(world: World) -> None:
    response = world.client("operator").post("/schedules/new", form_data(name="plain"))
    assert response.status_code == 302
    assert Schedule.objects.get(name="plain").concurrency_key is None


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"ckey_key": "c-{target.body.nope}"}, "ckey_key", "target.body.nope"),
        ({"ckey_key": "c-{0}"}, "ckey_key", "dotted field path"),
        ({"ckey_key": "c", "ckey_limit": "0"}, "ckey_limit", "1..1000"),
        ({"ckey_key": "c", "ckey_on_conflict": "wait"}, "ckey_on_conflict", "wait"),
    ],
)
def test_key_errors_are_inline_and_nothing_is_saved(
    world: World, overrides: dict[str, str], field: str, message: str
) -> None:
    before = Schedule.objects.count()
    data = form_data(name="bad-key", target=TARGET, **overrides)
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert message in block.group(1)
    assert Schedule.objects.count() == before


def test_the_execution_page_says_which_key_held_it(world: World) -> None:
    held = execution_row(
        world.schedule,
        db_now(),
        reason_code="held_key",
        reason="held: key customer-42 already running execution 0b0e (limit 1, on_conflict queue)",
    )
    ExecutionEvent.objects.create(
        tenant_id=held.tenant_id,
        schedule_id=held.schedule_id,
        execution=held,
        kind="held_key",
        message=held.reason,
        actor="beat",
    )
    holder = execution_row(
        world.schedule,
        db_now() - timedelta(minutes=1),
        state="running",
        concurrency_key="customer-42",
    )
    client = world.client("viewer")
    page = client.get(f"/executions/{held.id}/").content.decode()
    assert (
        page.count("held: key customer-42 already running execution 0b0e") == 2
    )  # state, timeline
    assert '<span class="kind">held_key</span>' in page
    page = client.get(f"/executions/{holder.id}/").content.decode()
    assert '<dd id="execution-key">customer-42</dd>' in page
