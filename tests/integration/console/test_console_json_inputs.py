"""Every JSON field of the console goes through the API's JSON rules
(core/api/inputs.loads_json): a document nested thousands deep, `NaN`,
`Infinity`, `1e999`, an escaped NUL or a lone surrogate is the form again with an
inline error naming the field and the reason — never a 500 — and nothing is
stored. Posted as a browser does, with the CSRF token of the page's form."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dispatch.models import Calendar, Execution, ExecutionState, Schedule
from tenants.models import AuditEvent
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db

SURROGATE = "contains an unpaired UTF-16 surrogate (not valid Unicode text)"

# (id, the field's text, what the inline error says after "<field>")
VECTORS = [
    ("deep", "[" * 3000 + "]" * 3000, ": is nested deeper than 32 levels"),
    ("nan", '{"n": NaN}', ": is not valid JSON (NaN is not a JSON number)"),
    ("infinity", '{"n": Infinity}', ": is not valid JSON (Infinity is not a JSON number)"),
    ("-infinity", '{"n": -Infinity}', ": is not valid JSON (-Infinity is not a JSON number)"),
    ("1e999", '{"n": 1e999}', ": is not valid JSON (the number 1e999 is out of range)"),
    ("nul", '{"note": "a\\u0000b"}', ".note: contains a NUL character"),
    ("surrogate", '{"note": "\\ud800"}', f".note: {SURROGATE}"),
    ("surrogate-key", '{"a\\udc00": 1}', f".a\\udc00: {SURROGATE}"),
]
VECTOR_PARAMS = [pytest.param(text, said, id=name) for name, text, said in VECTORS]


def post_with_csrf(client: Client, url: str, data: dict[str, Any]) -> Any:
    page = client.get(url)
    assert page.status_code == 200, page.status_code
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token, "the page has no form with a CSRF token"
    return client.post(url, data | {"csrfmiddlewaretoken": token.group(1)})


def _dead(execution: Execution) -> None:
    Execution.objects.filter(pk=execution.pk).update(state=ExecutionState.DEAD, error="HTTP 503")


def _audit_count() -> int:
    return AuditEvent.objects.count()


@pytest.mark.parametrize("field", ["payload", "headers"])
@pytest.mark.parametrize("text,said", VECTOR_PARAMS)
def test_rerun_form_json_is_checked_like_the_api(
    world: World, field: str, text: str, said: str
) -> None:
    _dead(world.execution)
    audits = _audit_count()
    client = world.client("operator", csrf=True)
    res = post_with_csrf(client, f"/executions/{world.execution.id}/rerun", {field: text})
    assert res.status_code == 400
    page = res.content.decode()
    assert f'<ul class="errorlist" id="id_{field}_error"><li>{field}{said}</li></ul>' in page, page[
        page.find("errorlist") - 200 : page.find("errorlist") + 400
    ]
    row = Execution.objects.get(pk=world.execution.pk)
    assert (row.state, row.reruns, row.attempt) == (ExecutionState.DEAD, 0, 1)
    assert row.target_override is None
    assert _audit_count() == audits


@pytest.mark.parametrize("text,said", VECTOR_PARAMS)
def test_calendar_create_sources_are_checked_like_the_api(
    world: World, text: str, said: str
) -> None:
    audits = _audit_count()
    client = world.client("operator", csrf=True)
    res = post_with_csrf(
        client, "/calendars/", {"name": "hostile", "description": "", "sources": text}
    )
    assert res.status_code == 400
    assert f"<p>Not saved:</p><ul><li>sources{said}</li></ul>" in res.content.decode()
    assert not Calendar.objects.filter(tenant=world.tenant).exists()
    assert _audit_count() == audits


@pytest.mark.parametrize("text,said", VECTOR_PARAMS)
def test_calendar_edit_sources_are_checked_like_the_api(world: World, text: str, said: str) -> None:
    client = world.client("operator", csrf=True)
    sources = '[{"type": "dates", "dates": ["2026-12-24"]}]'
    created = post_with_csrf(
        client, "/calendars/", {"name": "xmas", "description": "", "sources": sources}
    )
    assert created.status_code == 302
    calendar = Calendar.objects.get(tenant=world.tenant, name="xmas")
    stored = calendar.sources
    audits = _audit_count()
    res = post_with_csrf(
        client,
        f"/calendars/{calendar.id}/",
        {"name": "renamed", "description": "", "sources": text},
    )
    assert res.status_code == 400
    assert f"<p>Not saved:</p><ul><li>sources{said}</li></ul>" in res.content.decode()
    calendar.refresh_from_db()
    assert (calendar.name, calendar.sources) == ("xmas", stored)
    assert _audit_count() == audits


@pytest.mark.parametrize("text,said", VECTOR_PARAMS)
def test_schedule_form_target_is_checked_like_the_api(world: World, text: str, said: str) -> None:
    audits = _audit_count()
    before = Schedule.objects.count()
    client = world.client("operator", csrf=True)
    res = post_with_csrf(client, "/schedules/new", form_data(name="hostile", target=text))
    assert res.status_code == 400
    page = res.content.decode()
    assert f'<ul class="errorlist" id="id_target_error"><li>target{said}</li></ul>' in page
    assert Schedule.objects.count() == before
    assert _audit_count() == audits
