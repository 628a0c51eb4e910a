"""Names that would let one tenant pass for another or reach the platform's own
plumbing: reserved slugs (queue namespaces), slugs colliding in the secret
variables' names, and bidi / invisible characters in tenant, token and schedule names."""

from __future__ import annotations

import re
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.exceptions import InvalidInput
from tenants.models import ServiceToken, Tenant
from tenants.naming import RESERVED_SLUGS
from tenants.roles import Role
from tests.support.console_support import build_world, form_data

pytestmark = pytest.mark.django_db

INVISIBLE = [
    "\u202e",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2066",
    "\u2069",
    "\ufeff",
    "\u00ad",
    "\u2028",
]


@pytest.mark.parametrize("slug", sorted(RESERVED_SLUGS))
def test_platform_queue_names_are_reserved(slug: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        tenant_services.tenant_create(slug=slug)
    assert "reserved" in caught.value.detail["slug"][0]
    with pytest.raises(CommandError, match="reserved"):
        call_command("create_tenant", slug, stdout=StringIO())
    # The admin's form validates the model: refused there too.
    with pytest.raises(ValidationError) as invalid:
        Tenant(slug=slug, name=slug).full_clean()
    assert "slug" in invalid.value.message_dict
    assert not Tenant.objects.filter(slug=slug).exists()


def test_every_platform_queue_is_in_a_reserved_namespace(settings: Any) -> None:
    from bench.tasks import NOOP_QUEUE
    from dispatch.models import Priority
    from dispatch.ops.metrics import QUEUES

    queues = [*QUEUES, NOOP_QUEUE, settings.CELERY_TASK_DEFAULT_QUEUE, "celery"]
    queues += [f"{p}.short" for p in Priority.values]
    for queue in queues:
        assert queue.split(".")[0] in RESERVED_SLUGS, queue


@pytest.mark.parametrize(("first", "second"), [("a-b", "a_b"), ("a_b", "a-b"), ("x-y-z", "x_y-z")])
def test_slugs_mapping_to_the_same_secret_variables_are_refused(first: str, second: str) -> None:
    tenant_services.tenant_create(slug=first)
    with pytest.raises(InvalidInput) as caught:
        tenant_services.tenant_create(slug=second)
    message = caught.value.detail["slug"][0]
    assert first in message and "SCHED_SECRET_" in message
    assert not Tenant.objects.filter(slug=second).exists()
    # The database refuses it too, whoever writes the row.
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.create(slug=second, name=second)
    with pytest.raises(ValidationError):
        Tenant(slug=second, name=second).full_clean()


@pytest.mark.parametrize("slug", ["a__b", "a-_b", "a_-b"])
def test_slugs_with_two_separators_in_a_row_are_refused(slug: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        tenant_services.tenant_create(slug=slug)
    assert "separators" in caught.value.detail["slug"][0]


def test_ordinary_slugs_still_work() -> None:
    for slug in ("billing", "data-eng", "team_7", "highways", "low-latency", "defaults"):
        assert tenant_services.tenant_create(slug=slug).slug == slug


@pytest.mark.parametrize("char", INVISIBLE)
def test_tenant_names_refuse_invisible_characters(char: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        tenant_services.tenant_create(slug="ops", name=f"Ops{char}Team")
    assert f"U+{ord(char):04X}" in caught.value.detail["name"][0]
    assert not Tenant.objects.filter(slug="ops").exists()
    with pytest.raises(ValidationError) as invalid:
        Tenant(slug="ops", name=f"Ops{char}").full_clean()
    assert "name" in invalid.value.message_dict


@pytest.mark.parametrize("char", INVISIBLE)
def test_token_and_schedule_names_refuse_invisible_characters(
    api: APIClient, seed_example: dict[str, Any], char: str
) -> None:
    tokens_before = ServiceToken.objects.count()
    res = api.post("/v1/tokens", {"name": f"deploy{char}bot", "role": "viewer"}, format="json")
    assert res.status_code == 400, res.content
    assert "name" in res.json()["error"]["detail"]
    assert ServiceToken.objects.count() == tokens_before

    res = api.post("/v1/schedules", seed_example | {"name": f"night{char}ly"}, format="json")
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    assert "name" in err["detail"] and f"U+{ord(char):04X}" in err["message"]
    assert Schedule.objects.count() == 0


def test_ordinary_unicode_names_still_work(api: APIClient, seed_example: dict[str, Any]) -> None:
    res = api.post(
        "/v1/schedules", seed_example | {"name": "Prüfung — 東京 nightly"}, format="json"
    )
    assert res.status_code == 201, res.content
    res = api.post("/v1/tokens", {"name": "déploiement", "role": "viewer"}, format="json")
    assert res.status_code == 201, res.content


def test_console_token_form_shows_the_error_inline(db: Any) -> None:
    world = build_world()
    response = world.client("admin").post(
        "/tokens/", {"name": "deploy\u202ebot", "role": "viewer", "expires_at": ""}
    )
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(r'<ul class="errorlist" id="id_name_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert "U+202E" in block.group(1)
    assert not ServiceToken.objects.filter(name__startswith="deploy").exists()


def test_console_schedule_form_shows_the_error_inline(db: Any) -> None:
    world = build_world()
    before = Schedule.objects.count()
    response = world.client("operator").post(
        "/schedules/new", form_data(name="nightly\u202etxt.exe")
    )
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(r'<ul class="errorlist" id="id_name_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert "name: " in block.group(1) and "U+202E" in block.group(1)
    assert Schedule.objects.count() == before


def test_a_tenant_with_a_reserved_slug_cannot_save_queue_targets(
    api_for: Callable[[Tenant, Role], APIClient], seed_example: dict[str, Any]
) -> None:
    # Created before the slug was reserved (written straight to the table).
    legacy = Tenant.objects.create(slug="high", name="High")
    body = seed_example | {
        "tenant": "high",
        "target": {"type": "queue", "routing_key": "high.short"},
    }
    res = api_for(legacy, Role.ADMIN).post("/v1/schedules", body, format="json")
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    assert "target.routing_key" in err["detail"] and "reserved" in err["message"]
    assert Schedule.objects.count() == 0
