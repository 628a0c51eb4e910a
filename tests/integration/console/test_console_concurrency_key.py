"""The schedule form's optional concurrency-key fieldset: saved as the API's
concurrency_key object, shown again on edit, errors inline naming the part, nothing
saved; and the execution page shows why a run was held by a key."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatch.models import Schedule
from tests.support.console_support import World, build_world, form_data

pytestmark = pytest.mark.django_db

TARGET = '{"type": "http", "url": "https://billing.internal/hook", "body": {"customer_id": 42}}'


@pytest.fixture
def world(db: Any) -> World:
    return build_world()


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
