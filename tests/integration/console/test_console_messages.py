"""What a console change says it did (issue 35, defect 14): a one-time message
(django.contrib.messages), not a `?done=` in the address — shown once on the page
the change lands on, gone on reload, never in the URL (where a reload, the back
button or a shared link said it again). The footer's time-zone error is a message
too, but it stays beside its field and is not repeated among the page's messages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.support.console_support import World, text

pytestmark = pytest.mark.django_db


def shown(html: str) -> list[str]:
    """The page's general messages (templates/console/_messages.html), as text."""
    region = re.search(r'<div id="messages">(.*?)</div>', html, re.S)
    return re.findall(r"<p [^>]*>(.*?)</p>", region.group(1), re.S) if region else []


def lands(client: Client, response: Any, url: str) -> str:
    """The page a change redirected to, checked to carry no message in its address."""
    assert response.status_code == 302
    location = response["Location"]
    assert "done=" not in location and "?" not in location, location
    assert location == url, location
    return text(client.get(location.split("#")[0]))


def test_pause_says_so_once_and_not_in_the_address(world: World) -> None:
    client = world.client("operator")
    page = f"/schedules/{world.schedule.id}/"
    html = lands(client, client.post(f"{page}pause", {"reason": "freeze"}), page)
    assert shown(html) == ["Paused."]
    assert html.count("Paused.") == 1
    assert shown(text(client.get(page))) == [], "a reload does not say it again"
    again = client.post(f"{page}resume")
    assert shown(lands(client, again, page))[0].startswith("Resumed.")
    assert shown(text(client.get(page))) == []


def test_execution_cancel_says_so_once(world: World) -> None:
    client = world.client("operator")
    page = f"/executions/{world.execution.id}/"
    response = client.post(f"{page}cancel", {"reason": "freeze"})
    assert shown(lands(client, response, page)) == ["Cancelled."]
    assert shown(text(client.get(page))) == []


def test_alert_changes_say_so_once(world: World) -> None:
    client = world.client("admin")
    data = {"name": "ops", "kind": "email", "to": "ops@example.com", "enabled": "on"}
    html = lands(client, client.post("/alerts/channels/new", data), "/alerts/")
    assert shown(html) == ["Channel ops created"]
    assert shown(text(client.get("/alerts/"))) == []
    page = f"/schedules/{world.schedule.id}/"
    response = client.post(f"{page}alerts/snooze", {"until": ""})
    assert shown(lands(client, response, f"{page}#alerts")) == ["Snooze ended"]
    assert shown(text(client.get(page))) == []


def test_the_zone_error_stays_beside_its_field(world: World) -> None:
    client = world.client("operator")
    page = f"/schedules/{world.schedule.id}/"
    answer = client.post("/prefs/tz", {"tz": "Nowhere/Special", "next": page}, follow=True)
    html = text(answer)
    assert 'id="tz-pref-error" role="alert">“Nowhere/Special” is not a time zone' in html
    assert html.count("is not a time zone") == 1
    assert shown(html) == [], "not repeated among the page's messages"
