"""The console's schedule page and the API's preview describe a schedule and
resolve its H values through one function (selectors.cron_text)."""

from __future__ import annotations

import html
from typing import Any

from rest_framework.test import APIClient

from dispatch import services
from dispatch.selectors import cron_text
from tests.support.console_support import TARGET, World


def test_detail_page_and_api_preview_show_the_same_description_and_resolution(
    world: World, api_for: Any
) -> None:
    schedule = services.schedule_create(
        actor=world.admin_p,
        data={"name": "hashed", "cron": "H H * * 1-5", "target": TARGET},
    )
    text = cron_text(schedule.cron, seed=schedule.id)
    assert "H" not in text.resolved and text.description
    page = html.unescape(world.client("viewer").get(f"/schedules/{schedule.id}/").content.decode())
    assert f"— {text.description}" in page
    assert f"resolves to <code>{text.resolved}</code>" in page
    client: APIClient = api_for(world.tenant)
    body = client.get(f"/v1/schedules/{schedule.id}/preview").json()
    assert (body["description"], body["resolved"]) == (text.description, text.resolved)
