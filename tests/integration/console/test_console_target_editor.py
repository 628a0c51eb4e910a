"""The schedule form's target editor (console/target_editor.py): a target built from
structured fields (type, method, URL, header rows with plain values or secret
references, body) is validated like the API's and stored as the API would store it;
its errors name the target's field on the field that holds it; an edit through the
fields keeps the keys they do not cover; the JSON view still works when it is
edited, and shows an existing schedule's target."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import TARGET, World, form_data

pytestmark = pytest.mark.django_db

SECRET_REF = {"secret": "vault:kv/billing/hook#token"}


class FormFields(HTMLParser):
    """The values a browser would submit for the page's #schedule-form: each input's
    value, each select's selected option (else its first), each textarea's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: dict[str, str] = {}
        self.in_form = False
        self.select: str | None = None
        self.first_option: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.in_form = a.get("id") == "schedule-form"
        if not self.in_form or ("name" not in a and tag != "option"):
            return
        if tag == "input" and a.get("type") not in ("checkbox", "radio", "submit"):
            self.values[a["name"]] = a.get("value", "")
        elif tag == "select":
            self.select, self.first_option = a["name"], None
        elif tag == "option" and self.select is not None:
            if self.first_option is None:
                self.first_option = a.get("value", "")
                self.values.setdefault(self.select, self.first_option)
            if "selected" in a:
                self.values[self.select] = a.get("value", "")
        elif tag == "textarea":
            self.textarea = a["name"]
            self.values[self.textarea] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.in_form = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea" and self.textarea is not None:
            # HTML drops the newline right after <textarea>, as Django writes one there.
            self.values[self.textarea] = self.values[self.textarea].removeprefix("\n")
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.values[self.textarea] += data


def page_form(html: str) -> dict[str, str]:
    parser = FormFields()
    parser.feed(html)
    return parser.values


def structured(**overrides: Any) -> dict[str, Any]:
    """A submission of the structured fields only: no JSON box at all."""
    data = form_data(name="hook-call")
    del data["target"]
    data |= {
        "target_type": "http",
        "target_method": "PUT",
        "target_url": "https://billing.internal/hook",
        "target_header_name_0": "X-Tenant",
        "target_header_kind_0": "text",
        "target_header_value_0": "acme",
        "target_header_name_1": "Authorization",
        "target_header_kind_1": "secret",
        "target_header_value_1": SECRET_REF["secret"],
        "target_header_name_2": "",
        "target_header_kind_2": "text",
        "target_header_value_2": "",
        "target_body_format": "json",
        "target_body": '{"customer": 7,\r\n "full": true}',
    }
    return data | overrides


def test_an_http_schedule_from_the_structured_fields_alone(world: World) -> None:
    response = world.client("operator").post("/schedules/new", structured())
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(name="hook-call").target == {
        "type": "http",
        "url": "https://billing.internal/hook",
        "method": "PUT",
        "headers": {"X-Tenant": "acme", "Authorization": SECRET_REF},
        "body": {"customer": 7, "full": True},
        "timeout_s": 300,
    }


def test_a_queue_schedule_from_its_fields_with_a_text_body(world: World) -> None:
    data = structured(
        target_type="queue",
        target_routing_key="billing.exports",
        target_body_format="text",
        target_body="export\r\nall",
    )
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    # The http fields typed before switching type are not part of it.
    assert Schedule.objects.get(name="hook-call").target == {
        "type": "queue",
        "broker": "default",
        "exchange": "",
        "routing_key": "billing.exports",
        "body": "export\nall",
        "timeout_s": 30,
    }


def test_a_bad_url_is_named_on_the_url_field_and_nothing_is_stored(world: World) -> None:
    before = Schedule.objects.count()
    response = world.client("operator").post(
        "/schedules/new", structured(target_url="ftp://billing.internal/hook")
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        '<ul class="errorlist" id="id_target_url_error">'
        "<li>target.url: scheme must be http or https</li></ul>"
    ) in html
    assert 'id="id_target_error"' not in html
    assert Schedule.objects.count() == before
    # The live preview validates the same fields the same way.
    preview = world.client("operator").post("/schedules/preview", structured(target_url="ftp://x"))
    assert "target.url: scheme must be http or https" in preview.content.decode()


def test_a_credential_header_given_as_text_is_named_on_its_row(world: World) -> None:
    data = structured(target_header_kind_1="text", target_header_value_1="Bearer abc")
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 400
    html = response.content.decode()
    start = html.index('id="id_target_header_value_1_error"')
    assert "target.headers.Authorization: carries a credential" in html[start : start + 300]
    assert not Schedule.objects.filter(name="hook-call").exists()


def test_a_body_that_is_not_json_says_so_on_the_body(world: World) -> None:
    response = world.client("operator").post("/schedules/new", structured(target_body="{oops"))
    assert response.status_code == 400
    html = response.content.decode()
    start = html.index('id="id_target_body_error"')
    assert "target.body: is not valid JSON" in html[start : start + 300]


def test_the_live_preview_works_from_the_structured_fields(world: World) -> None:
    preview = world.client("operator").post("/schedules/preview", structured())
    html = preview.content.decode()
    assert preview.status_code == 200 and "Not valid yet" not in html
    assert "At 09:00 AM, Monday through Friday" in html


def test_an_edit_through_the_fields_keeps_what_they_do_not_cover(world: World) -> None:
    target = TARGET | {
        "headers": {"X-Tenant": "acme", "Authorization": SECRET_REF},
        "completion": "callback",
        "heartbeat_s": 30,
    }
    s = services.schedule_create(
        actor=world.admin_p, data={"name": "edit-me", "cron": "0 0 * * *", "target": target}
    )
    client = world.client("operator")
    page = client.get(f"/schedules/{s.id}/edit")
    fields = page_form(page.content.decode())
    # Pre-filled from the target, secret references as references.
    assert fields["target_type"] == "http" and fields["target_method"] == "POST"
    assert fields["target_url"] == "https://billing.internal/hook"
    assert [fields[f"target_header_{p}_0"] for p in ("name", "kind", "value")] == [
        "X-Tenant",
        "text",
        "acme",
    ]
    assert [fields[f"target_header_{p}_1"] for p in ("name", "kind", "value")] == [
        "Authorization",
        "secret",
        SECRET_REF["secret"],
    ]
    fields["target_url"] = "https://billing.internal/v2/hook"
    fields["target_header_value_0"] = "acme-eu"
    # A browser sends the (unchanged) JSON box with CRLF line breaks: still not an edit.
    fields["target"] = fields["target"].replace("\n", "\r\n")
    response = client.post(f"/schedules/{s.id}/edit", fields)
    assert response.status_code == 302, response.content.decode()[:3000]
    s.refresh_from_db()
    assert s.target == {
        "type": "http",
        "url": "https://billing.internal/v2/hook",
        "method": "POST",
        "headers": {"X-Tenant": "acme-eu", "Authorization": SECRET_REF},
        "timeout_s": 300,
        "completion": "callback",
        "heartbeat_s": 30,
    }


def test_an_edited_json_box_is_the_target_as_before(world: World) -> None:
    client = world.client("operator")
    fields = page_form(client.get("/schedules/new").content.decode())
    assert fields["target_type"] == "http" and fields["target_shown"]
    fields |= {"name": "by-json", "cron": "0 9 * * *", "timezone": "UTC"}
    # The structured fields still hold the proposed target; the JSON box was edited.
    fields["target"] = json.dumps(
        {"type": "queue", "routing_key": "billing.jobs", "body": {"k": 1}}, indent=2
    )
    response = client.post("/schedules/new", fields)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get(name="by-json").target == {
        "type": "queue",
        "broker": "default",
        "exchange": "",
        "routing_key": "billing.jobs",
        "body": {"k": 1},
        "timeout_s": 30,
    }
    # Its errors stay on the JSON box, which is then shown open.
    fields |= {"name": "by-json-2", "target": '{"type": "http", "url": "ftp://x"}'}
    bad = client.post("/schedules/new", fields)
    assert bad.status_code == 400
    html = bad.content.decode()
    assert (
        '<ul class="errorlist" id="id_target_error">'
        "<li>target.url: scheme must be http or https</li></ul>"
    ) in html
    assert '<details class="target-json" open>' in html
    assert 'id="id_target_url_error"' not in html


def test_the_json_view_shows_an_existing_schedules_target(world: World) -> None:
    target = TARGET | {"headers": {"Authorization": SECRET_REF}, "body": "ping"}
    s = services.schedule_create(
        actor=world.admin_p, data={"name": "shown", "cron": "0 0 * * *", "target": target}
    )
    html = world.client("operator").get(f"/schedules/{s.id}/edit").content.decode()
    # Closed until it is used: the structured fields come first.
    assert '<details class="target-json">' in html
    shown = json.loads(page_form(html)["target"])
    # timeout_s has a field of its own; the rest of the stored target, as stored.
    assert shown == {k: v for k, v in s.target.items() if k != "timeout_s"}
    assert shown["headers"]["Authorization"] == SECRET_REF and shown["body"] == "ping"
    assert page_form(html)["target_body_format"] == "text"
