"""Managed commands at save time: typed placeholders, the environment allow-list and
the operator's registration (values are data, never options or paths)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from dispatch.models import ManagedCommand, Schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def export(db: Any) -> ManagedCommand:
    return ManagedCommand.objects.create(
        name="export",
        argv=[
            "/usr/local/bin/export",
            "--day={day:date}",
            "--since",
            "{since:datetime}",
            "--limit",
            "{n:int}",
            "--mode={mode:choice:full|delta}",
            "{label}",
            "{file:path-under:/srv/exports}",
        ],
        env=["API_TOKEN"],
        writable_paths=["/srv/exports"],
    )


GOOD = {
    "day": "2026-03-29",
    "since": "2026-03-29T01:30:00+02:00",
    "n": 10,
    "mode": "delta",
    "label": "nightly run 7",
    "file": "daily/out.csv",
}


def post(api: APIClient, args: dict[str, Any], **target: Any) -> Any:
    body = {
        "name": "export-nightly",
        "cron": "0 2 * * *",
        "target": {"type": "command", "command": "export", "args": args} | target,
    }
    return api.post("/v1/schedules", body, format="json")


def test_typed_values_are_accepted_and_normalised(api: APIClient, export: ManagedCommand) -> None:
    res = post(api, GOOD, env={"API_TOKEN": {"secret": "env:EXPORT_TOKEN"}})
    assert res.status_code == 201, res.content
    stored = Schedule.objects.get(pk=res.json()["id"]).target
    assert stored["args"] == GOOD | {"since": "2026-03-28T23:30:00Z", "n": "10"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("label", "--output=/etc/cron.d/x"),  # an option, not a value
        ("label", "-rf"),
        ("label", "../../etc/hostname"),
        ("label", "/etc/hostname"),
        ("label", "a\nb"),
        ("file", "../../etc/hostname"),
        ("file", "/etc/hostname"),
        ("file", "daily/../../x"),
        ("file", "-o"),
        ("file", ".ssh/id_rsa"),
        ("n", "-1"),
        ("n", "1e3"),
        ("n", True),
        ("day", "2026-02-30"),
        ("day", "--help"),
        ("since", "2026-03-29T01:30:00"),  # no offset: which 01:30?
        ("since", "now"),
        ("mode", "full;rm"),
        ("mode", "--full"),
    ],
)
def test_values_that_are_options_or_paths_are_refused_naming_the_field(
    api: APIClient, export: ManagedCommand, field: str, value: Any
) -> None:
    res = post(api, GOOD | {field: value})
    assert res.status_code == 400, res.content
    assert f"target.args.{field}" in res.json()["error"]["detail"], res.json()
    assert not Schedule.objects.exists()


def test_values_outside_a_placeholder_and_missing_ones_are_refused(
    api: APIClient, export: ManagedCommand
) -> None:
    res = post(api, GOOD | {"output": "x"})
    assert res.status_code == 400 and "target.args.output" in res.json()["error"]["detail"]
    res = post(api, {k: v for k, v in GOOD.items() if k != "n"})
    assert res.status_code == 400 and "target.args.n" in res.json()["error"]["detail"]


@pytest.mark.parametrize(
    "name",
    [
        "NODE_OPTIONS",
        "PERL5OPT",
        "GCONV_PATH",
        "JAVA_TOOL_OPTIONS",
        "GIT_SSH_COMMAND",
        "LD_PRELOAD",
        "PATH",
        "OTHER_TOKEN",
    ],
)
def test_environment_is_an_allow_list_of_declared_names(
    api: APIClient, export: ManagedCommand, name: str
) -> None:
    res = post(api, GOOD, env={name: {"secret": "env:X"}})
    assert res.status_code == 400, res.content
    assert f"target.env.{name}" in res.json()["error"]["detail"]
    assert "declared: API_TOKEN" in res.json()["error"]["detail"][f"target.env.{name}"][0]


def test_untyped_placeholders_of_existing_registrations_are_plain_text(
    api: APIClient, db: Any
) -> None:
    ManagedCommand.objects.create(name="export", argv=["/usr/local/bin/export", "--day", "{day}"])
    assert post(api, {"day": "2026-01-01"}).status_code == 201
    res = post(api, {"day": "--output=/tmp/x"})
    assert res.status_code == 400 and "target.args.day" in res.json()["error"]["detail"]


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"argv": ["export", "{day}"]}, "argv"),  # relative program
        ({"argv": ["/bin/{prog}"]}, "argv"),  # the tenant would choose the program
        ({"argv": ["/bin/x", "{day.__class__}"]}, "argv"),
        ({"argv": ["/bin/x", "{0}"]}, "argv"),
        ({"argv": ["/bin/x", "{day!r}"]}, "argv"),
        ({"argv": ["/bin/x", "{day:float}"]}, "argv"),
        ({"argv": ["/bin/x", "{day:date}", "{day:str}"]}, "argv"),
        ({"argv": ["/bin/x", "{f:path-under:/srv/data}"]}, "argv"),  # not declared
        ({"argv": ["/bin/x", "{f:path-under:/srv/../etc}"], "readable_paths": ["/srv"]}, "argv"),
        ({"argv": ["/bin/x"], "env": ["NODE_OPTIONS"]}, "env"),
        ({"argv": ["/bin/x"], "env": ["LD_LIBRARY_PATH"]}, "env"),
        ({"argv": ["/bin/x"], "writable_paths": ["/"]}, "writable_paths"),
        ({"argv": ["/bin/x"], "writable_paths": ["srv"]}, "writable_paths"),
        ({"argv": ["/bin/x"], "readable_paths": ["/proc/1"]}, "readable_paths"),
        ({"argv": ["/bin/x"], "max_procs": 0}, "max_procs"),
        # NUL: PostgreSQL's jsonb refuses it, so it was a 500 on save, not a field error.
        ({"argv": ["/bin/x", "a\x00b"]}, "argv"),
        ({"argv": ["/bin/x\x00"]}, "argv"),
        ({"argv": ["/bin/x"], "readable_paths": ["/srv/in\x00"]}, "readable_paths"),
        ({"argv": ["/bin/x"], "writable_paths": ["/srv/out\x00x"]}, "writable_paths"),
        ({"argv": ["/bin/x"], "writable_paths": ["/srv/../etc"]}, "writable_paths"),
    ],
)
def test_registration_is_checked_when_an_operator_saves_it(
    fields: dict[str, Any], bad: str
) -> None:
    with pytest.raises(ValidationError) as err:
        ManagedCommand(name="x", **fields).full_clean()
    assert bad in err.value.message_dict, err.value.message_dict


def test_a_valid_registration_passes() -> None:
    ManagedCommand(
        name="x",
        argv=["/usr/bin/report", "--out={f:path-under:/srv/exports/daily}", "{{literal}}"],
        env=["API_TOKEN"],
        writable_paths=["/srv/exports"],
    ).full_clean()


def test_production_settings_refuse_unsandboxed_commands() -> None:
    import os
    import secrets
    import subprocess
    import sys
    from pathlib import Path

    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="config.production",
        SECRET_KEY=secrets.token_urlsafe(50),
        COMMAND_SANDBOX="none",
    )
    res = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "COMMAND_SANDBOX=none" in res.stderr, res.stderr


def test_admin_shows_a_bad_registration_on_its_field(admin_client: Any) -> None:
    form = {
        "name": "export",
        "argv": '["/usr/local/bin/export", "{out:path-under:/srv/exports}"]',
        "timeout_s": "60",
        "enabled": "on",
        "env": '["NODE_OPTIONS"]',
        "readable_paths": "[]",
        "writable_paths": "[]",
        "cpu_s": "60",
        "memory_mb": "256",
        "max_procs": "16",
    }
    res = admin_client.post("/admin/dispatch/managedcommand/add/", form)
    assert res.status_code == 200  # the form again, not a redirect
    errors = res.context["adminform"].form.errors
    assert "path-under" in errors["argv"][0] and "NODE_OPTIONS" in errors["env"][0]
    assert not ManagedCommand.objects.exists()
    form |= {"env": '["API_TOKEN"]', "writable_paths": '["/srv/exports"]'}
    res = admin_client.post("/admin/dispatch/managedcommand/add/", form)
    assert res.status_code == 302, res.context["adminform"].form.errors
    assert ManagedCommand.objects.get().writable_paths == ["/srv/exports"]


def test_admin_shows_a_nul_in_a_registration_on_its_field(admin_client: Any) -> None:
    """A NUL (typed as \\u0000 in the JSON) was saved as is, and PostgreSQL refused it: a 500."""
    form = {
        "name": "export",
        "argv": '["/usr/local/bin/export", "a\\u0000b"]',
        "timeout_s": "60",
        "enabled": "on",
        "env": "[]",
        "readable_paths": '["/srv/in\\u0000"]',
        "writable_paths": "[]",
        "cpu_s": "60",
        "memory_mb": "256",
        "max_procs": "16",
    }
    res = admin_client.post("/admin/dispatch/managedcommand/add/", form)
    assert res.status_code == 200
    errors = res.context["adminform"].form.errors
    assert "NUL" in errors["argv"][0] and "no NUL" in errors["readable_paths"][0], errors
    assert not ManagedCommand.objects.exists()
