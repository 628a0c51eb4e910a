"""Managed commands on the operators' pages (issue 35, defect 20): platform staff list,
register and disable them in the console (before: only in the Django admin), with the
model's own check naming every wrong field at once; nobody else sees the pages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dispatch import services
from dispatch.models import ManagedCommand
from tenants.models import AuditEvent
from tests.support.console_support import World, text

pytestmark = pytest.mark.django_db


def command_form(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "export",
        "description": "the nightly export",
        "argv": '["/usr/local/bin/export", "--day={day:date}", "{out:path-under:/srv/exports}"]',
        "timeout_s": "600",
        "env": "API_TOKEN\n",
        "readable_paths": "",
        "writable_paths": "/srv/exports",
        "cpu_s": "120",
        "memory_mb": "512",
        "max_procs": "16",
    }
    data.update(overrides)
    return data


def field_errors(html: str, field: str) -> str:
    block = re.search(rf'<ul class="errorlist" id="id_{field}_error"[^>]*>(.*?)</ul>', html, re.S)
    return block.group(1) if block else ""


def test_the_operators_page_links_to_the_commands_page(world: World) -> None:
    html = text(world.client("staff").get("/ops/"))
    assert 'href="/ops/commands/"' in html


@pytest.mark.parametrize("who", ["admin", "operator", "viewer", "outsider"])
def test_the_commands_pages_are_staff_only(world: World, who: str) -> None:
    command = ManagedCommand.objects.create(name="report", argv=["/bin/true"])
    client = world.client(who)
    assert client.get("/ops/commands/").status_code == 404
    assert client.post("/ops/commands/", command_form()).status_code == 404
    assert client.get(f"/ops/commands/{command.pk}/disable").status_code == 404
    assert client.post(f"/ops/commands/{command.pk}/disable").status_code == 404
    assert client.post(f"/ops/commands/{command.pk}/enable").status_code == 404
    assert list(ManagedCommand.objects.values_list("name", "enabled")) == [("report", True)]
    anonymous = Client().get("/ops/commands/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


def test_a_bad_registration_names_every_wrong_field(world: World) -> None:
    ManagedCommand.objects.create(name="taken", argv=["/bin/true"])
    bad = command_form(
        name="taken",
        argv='["bin/export", "{day:float}"',  # not even JSON
        timeout_s="-5",
        env="LD_PRELOAD\nAPI_TOKEN",
        readable_paths="/srv/../etc",
        writable_paths="srv/exports",
        cpu_s="0",
        memory_mb="lots",
        max_procs="1",
    )
    res = world.client("staff").post("/ops/commands/", bad)
    assert res.status_code == 400
    html = text(res)
    expected = {
        "name": "name: Managed command with this Name already exists",
        "argv": "argv: is not valid JSON",
        "timeout_s": "timeout_s: Ensure this value is greater than or equal to 0",
        "env": "env: &#x27;LD_PRELOAD&#x27;: must be an upper-case name",
        "readable_paths": "readable_paths: &#x27;/srv/../etc&#x27;: must be an absolute, normalised directory (no &#x27;..&#x27;, no NUL)",
        "writable_paths": "writable_paths: &#x27;srv/exports&#x27;: must be an absolute",
        "cpu_s": "cpu_s: must be at least 1",
        "memory_mb": "memory_mb: Enter a whole number",
        "max_procs": "max_procs: must be at least 2",
    }
    for field, message in expected.items():
        assert message in field_errors(html, field), (
            field,
            field_errors(html, field) or html[:6000],
        )
    assert 'aria-invalid="true"' in html
    assert list(ManagedCommand.objects.values_list("name", flat=True)) == ["taken"]


def test_a_registration_with_nul_or_a_bad_template_is_an_inline_error(world: World) -> None:
    client = world.client("staff")
    # A NUL typed as \u0000 in the JSON reached the database (a 500); a raw one in a
    # field is refused by the input guard before any view, naming the field.
    res = client.post("/ops/commands/", command_form(argv='["/usr/local/bin/export", "a\\u0000b"]'))
    assert res.status_code == 400
    assert "argv: element 1: must not contain a NUL character" in field_errors(text(res), "argv")
    raw = client.post("/ops/commands/", command_form(readable_paths="/srv/in\x00"))
    assert raw.status_code == 400 and "readable_paths: contains a NUL character" in text(raw)
    template = command_form(argv='["/usr/local/bin/export", "{day.__class__}"]')
    res = client.post("/ops/commands/", template)
    assert res.status_code == 400
    assert "argv: element 1: placeholder" in field_errors(text(res), "argv")
    assert not ManagedCommand.objects.exists()


def test_staff_register_a_command_that_a_tenant_can_then_use(world: World) -> None:
    client = world.client("staff")
    res = client.post("/ops/commands/", command_form(tenants=[str(world.tenant.pk)], egress="on"))
    command = ManagedCommand.objects.get(name="export")
    assert res.status_code == 302 and res["Location"] == f"/ops/commands/#command-{command.pk}"
    assert command.argv == [
        "/usr/local/bin/export",
        "--day={day:date}",
        "{out:path-under:/srv/exports}",
    ]
    assert command.env == ["API_TOKEN"] and command.writable_paths == ["/srv/exports"]
    assert command.readable_paths == [] and command.egress and command.enabled
    assert (command.timeout_s, command.cpu_s, command.memory_mb, command.max_procs) == (
        600,
        120,
        512,
        16,
    )
    assert list(command.tenants.all()) == [world.tenant]
    page = text(client.get("/ops/commands/"))
    assert f'id="command-{command.pk}"' in page and "the nightly export" in page
    audit = AuditEvent.objects.get(action="command.register")
    assert audit.actor_label == "user:root" and audit.actor_id == str(world.staff.pk)
    assert audit.tenant is None and audit.after["tenants"] == ["billing"]
    # Its tenant's schedules may name it now.
    schedule = services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "export-daily",
            "cron": "0 1 * * *",
            "target": {
                "type": "command",
                "command": "export",
                "args": {"day": "2026-12-01", "out": "daily.csv"},
            },
        },
    )
    assert schedule.target["command"] == "export"


def test_staff_disable_a_command_after_confirming_and_enable_it_again(world: World) -> None:
    command = ManagedCommand.objects.create(name="report", argv=["/bin/true"])
    services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "rep",
            "cron": "0 1 * * *",
            "target": {"type": "command", "command": "report"},
        },
    )
    client = world.client("staff")
    confirm = client.get(f"/ops/commands/{command.pk}/disable")
    assert confirm.status_code == 200
    assert "<strong>1 live schedule</strong>" in text(confirm)
    command.refresh_from_db()
    assert command.enabled, "asking to confirm disables nothing"
    assert (
        world.client("staff", csrf=True).post(f"/ops/commands/{command.pk}/disable").status_code
        == 403
    )
    done = client.post(f"/ops/commands/{command.pk}/disable")
    assert done.status_code == 302
    command.refresh_from_db()
    assert not command.enabled
    assert "disabled" in text(client.get("/ops/commands/"))
    assert AuditEvent.objects.get(action="command.disable").before == {"enabled": True}
    assert client.post(f"/ops/commands/{command.pk}/enable").status_code == 302
    command.refresh_from_db()
    assert command.enabled
    assert AuditEvent.objects.filter(action="command.enable").exists()
    assert client.get("/ops/commands/999999/disable").status_code == 404
