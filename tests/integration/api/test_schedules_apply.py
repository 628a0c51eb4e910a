"""POST /v1/schedules:apply and GET /v1/schedules:export: schedules as code.

A file of definitions keyed by name is applied in one transaction (create, update,
unchanged, and with prune delete), nothing half-applied on any error; the export is
the same normalization, so apply(export()) changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.services.apply import APPLY_MAX, NEXT_RUNS, PAUSE_REASON
from dispatch.states import EventKind, Trigger
from tenants.models import AuditEvent, Tenant, TenantQuota
from tenants.roles import Role
from tests.support.concurrency import at_once
from tests.support.rows import execution_row

TARGET = {"type": "http", "url": "https://billing.internal/jobs/report"}
LATER = "2030-09-26T09:00:00Z"


def d(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "cron": "0 2 * * *", "target": TARGET} | more


def apply(client: APIClient, schedules: Any, **flags: Any) -> Any:
    return client.post("/v1/schedules:apply", {"schedules": schedules, **flags}, format="json")


def applied(client: APIClient, schedules: Any, **flags: Any) -> dict[str, Any]:
    res = apply(client, schedules, **flags)
    assert res.status_code == 200, res.content
    body: dict[str, Any] = res.json()
    return body


def export(client: APIClient) -> list[dict[str, Any]]:
    res = client.get("/v1/schedules:export")
    assert res.status_code == 200, res.content
    schedules: list[dict[str, Any]] = res.json()["schedules"]
    return schedules


def live(tenant: Tenant) -> dict[str, Schedule]:
    rows = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    return {s.name: s for s in rows}


def writes(tenant: Tenant) -> tuple[int, int, int, list[tuple[str, int]]]:
    """Everything an apply could write for `tenant`: schedule rows, audit rows,
    timeline events, and each row's (name, version)."""
    return (
        Schedule.objects.filter(tenant=tenant).count(),
        AuditEvent.objects.filter(tenant=tenant).count(),
        ExecutionEvent.objects.filter(tenant_id=tenant.id).count(),
        sorted(Schedule.objects.filter(tenant=tenant).values_list("name", "version")),
    )


def error(res: Any, status: int) -> dict[str, Any]:
    assert res.status_code == status, res.content
    err: dict[str, Any] = res.json()["error"]
    return err


pytestmark = pytest.mark.django_db


def test_create_update_unchanged_delete_in_one_answer(api: APIClient, tenant: Tenant) -> None:
    first = applied(api, [d("a"), d("b"), d("c")])
    assert first["summary"] == {"create": 3, "update": 0, "unchanged": 0, "delete": 0}
    assert first["dry_run"] is False
    ids = {c["name"]: c["id"] for c in first["changes"]}
    assert set(ids) == {"a", "b", "c"} and all(ids.values())
    assert all(c["version"] == 1 for c in first["changes"])
    create = first["changes"][0]
    assert create["next_runs"]["before"] == []
    assert len(create["next_runs"]["after"]) == NEXT_RUNS
    assert all(t.endswith("T02:00:00Z") for t in create["next_runs"]["after"])
    audit_before = AuditEvent.objects.filter(tenant=tenant).count()

    body = applied(api, [d("a"), d("b", cron="30 3 * * *", jitter_s=30), d("new")], prune=True)
    assert body["summary"] == {"create": 1, "update": 1, "unchanged": 1, "delete": 1}
    # The request's order, then the deletions by name.
    assert [(c["name"], c["action"]) for c in body["changes"]] == [
        ("a", "unchanged"),
        ("b", "update"),
        ("new", "create"),
        ("c", "delete"),
    ]
    unchanged, update, _, delete = body["changes"]
    assert "fields" not in unchanged and unchanged["version"] == 1 and unchanged["id"] == ids["a"]
    assert update["fields"] == {
        "cron": {"before": "0 2 * * *", "after": "30 3 * * *"},
        "jitter_s": {"before": 0, "after": 30},
    }
    assert update["version"] == 2 and update["id"] == ids["b"]
    assert all(t.endswith("T02:00:00Z") for t in update["next_runs"]["before"])
    assert len(update["next_runs"]["after"]) == NEXT_RUNS
    assert all("T03:30:" in t for t in update["next_runs"]["after"])
    assert delete["id"] == ids["c"] and delete["next_runs"]["after"] == []
    assert len(delete["next_runs"]["before"]) == NEXT_RUNS

    rows = live(tenant)
    assert set(rows) == {"a", "b", "new"}
    assert rows["a"].version == 1 and rows["b"].version == 2 and rows["b"].jitter_s == 30
    assert Schedule.objects.get(pk=ids["c"]).deleted_at is not None
    # One audit row for each write (b's update, new's create, c's delete), none for a.
    actions = list(
        AuditEvent.objects.filter(tenant=tenant, pk__gt=0)
        .order_by("pk")
        .values_list("action", "object_id")[audit_before:]
    )
    assert sorted(a for a, _ in actions) == [
        "schedule.create",
        "schedule.delete",
        "schedule.update",
    ]
    assert ids["a"] not in {o for _, o in actions}


def test_a_field_left_out_means_its_default_not_as_it_is(api: APIClient, tenant: Tenant) -> None:
    applied(api, [d("a", jitter_s=30, retry={"max_attempts": 7}, priority="high")])
    # The export holds only the retry key that differs; applied back, it is unchanged.
    assert export(api)[0]["retry"] == {"max_attempts": 7}
    assert applied(api, export(api))["summary"]["unchanged"] == 1
    body = applied(api, [d("a")])
    fields = body["changes"][0]["fields"]
    assert set(fields) == {"jitter_s", "retry", "priority"}
    assert fields["jitter_s"] == {"before": 30, "after": 0}
    a = live(tenant)["a"]
    assert (a.jitter_s, a.priority, a.retry["max_attempts"]) == (0, "default", 3)


def test_prune_never_touches_one_off_jobs(api: APIClient, tenant: Tenant) -> None:
    res = api.post("/v1/jobs", {"run_at": LATER, "target": TARGET, "name": "remind"}, format="json")
    assert res.status_code == 201, res.content
    job_id = res.json()["id"]
    batch = {"jobs": [{"run_at": LATER, "target": TARGET, "idempotency_key": "k1"}]}
    res = api.post("/v1/jobs:batch", batch, format="json")
    assert res.status_code == 200, res.content
    batch_id = res.json()["results"][0]["job"]["id"]
    applied(api, [d("a")])
    body = applied(api, [], prune=True)
    assert body["summary"] == {"create": 0, "update": 0, "unchanged": 0, "delete": 1}
    assert [c["name"] for c in body["changes"]] == ["a"]
    for pk in (job_id, batch_id):
        job = Schedule.objects.get(pk=pk)
        assert job.deleted_at is None and job.version == 1
    # Not a definition: the export leaves it out, and apply neither adopts nor collides with it.
    assert export(api) == []
    err = error(apply(api, [d("remind", cron=None, run_at=LATER)]), 400)
    assert list(err["detail"]) == ["schedules[0].name"]
    assert "/v1/jobs" in err["message"]


def test_dry_run_writes_nothing_and_answers_as_the_real_apply(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("a"), d("b"), d("gone")])
    wanted = [d("a", jitter_s=5), d("b"), d("c", paused=True)]
    before = writes(tenant)
    dry = applied(api, wanted, prune=True, dry_run=True)
    assert writes(tenant) == before
    assert dry["dry_run"] is True
    assert dry["summary"] == {"create": 1, "update": 1, "unchanged": 1, "delete": 1}
    create = next(c for c in dry["changes"] if c["action"] == "create")
    assert create["id"] is None and create["version"] == 2  # created, then paused
    real = applied(api, wanted, prune=True)
    assert real["summary"] == dry["summary"]
    for wet, dried in zip(real["changes"], dry["changes"], strict=True):
        assert (wet["name"], wet["action"], wet["version"]) == (
            dried["name"],
            dried["action"],
            dried["version"],
        )
        assert wet.get("fields") == dried.get("fields")
        if wet["action"] != "create":  # a create's H values and id are its own
            assert wet["id"] == dried["id"] and wet["next_runs"] == dried["next_runs"]
    assert writes(tenant) != before


def test_an_invalid_item_is_a_400_naming_it_and_nothing_is_applied(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("keep")])
    before = writes(tenant)
    cases = [
        ([d("new"), d("bad", cron="61 * * * *")], "schedules[1].cron"),
        ([d("new"), d("bad", priority="urgent")], "schedules[1].priority"),
        ([d("new"), d("bad", colour="red")], "schedules[1].colour"),
        (
            [d("new"), d("bad", target={"type": "http", "url": "ftp://x/"})],
            "schedules[1].target.url",
        ),
        ([d("new"), d("bad", retry={"max_attempts": 0})], "schedules[1].retry.max_attempts"),
        ([d("new"), {"cron": "* * * * *", "target": TARGET}], "schedules[1].name"),
        ([d("new"), "not an object"], "schedules[1]"),
        ([d("new"), d("bad", cron=None)], "schedules[1].cron"),
        ([d("keep", cron=None, run_at=LATER)], "schedules[0].run_at"),  # kind cannot change
        ([d("new"), d("bad", tenant="outsider")], "schedules[1].tenant"),
        ([d("new"), d("bad", id="x")], "schedules[1].id"),
    ]
    for schedules, field in cases:
        err = error(apply(api, schedules, prune=True), 400)
        assert field in err["detail"], (field, err)
        assert err["message"].startswith(f"{field}:"), (field, err)
    assert writes(tenant) == before
    assert set(live(tenant)) == {"keep"}


def test_the_envelope_is_checked(api: APIClient, tenant: Tenant) -> None:
    for body, field in [
        ([], "non_field_errors"),
        ({"schedules": "x"}, "schedules"),
        ({"schedule": []}, "schedule"),
        ({"schedules": [], "prune": "yes"}, "prune"),
        ({"schedules": [], "dry_run": 1}, "dry_run"),
    ]:
        res = api.post("/v1/schedules:apply", body, format="json")
        assert field in error(res, 400)["detail"], body
    res = api.post("/v1/schedules:apply?prune=true", {"schedules": []}, format="json")
    assert "prune" in error(res, 400)["detail"]


def test_quota_is_a_422_and_nothing_is_applied(api: APIClient, tenant: Tenant) -> None:
    applied(api, [d("one")])
    TenantQuota.objects.filter(tenant=tenant).update(max_schedules=3)
    before = writes(tenant)
    err = error(apply(api, [d("one", jitter_s=9), d("two"), d("three"), d("four")]), 422)
    assert err["code"] == "quota_exceeded"
    assert list(err["detail"]) == ["schedules[3]"]
    assert writes(tenant) == before
    dry = error(apply(api, [d("two"), d("three"), d("four")], dry_run=True), 422)
    assert dry["code"] == "quota_exceeded" and list(dry["detail"]) == ["schedules[2]"]
    assert applied(api, [d("one"), d("two"), d("three")])["summary"]["create"] == 2


def test_a_stale_version_is_a_409_and_nothing_is_applied(api: APIClient, tenant: Tenant) -> None:
    applied(api, [d("a")])
    a = live(tenant)["a"]
    res = api.patch(f"/v1/schedules/{a.id}", {"jitter_s": 3, "version": 1}, format="json")
    assert res.status_code == 200, res.content
    before = writes(tenant)
    err = error(apply(api, [d("new"), d("a", jitter_s=4, version=1)]), 409)
    assert err["code"] == "conflict" and list(err["detail"]) == ["schedules[1].version"]
    assert "it is now 2" in err["message"]
    assert writes(tenant) == before
    # A version for a name that is not live is stale too.
    err = error(apply(api, [d("nobody", version=1)]), 409)
    assert list(err["detail"]) == ["schedules[0].version"]
    body = applied(api, [d("a", jitter_s=4, version=2)])
    assert body["changes"][0]["version"] == 3


def test_duplicate_names_are_a_400(api: APIClient, tenant: Tenant) -> None:
    err = error(apply(api, [d("a"), d("b"), d(" a ")]), 400)
    assert list(err["detail"]) == ["schedules[2].name"]
    assert "duplicate" in err["message"] and "schedules[0]" in err["message"]
    assert not Schedule.objects.filter(tenant=tenant).exists()


def test_depends_on_by_name_in_the_file_and_the_tenant(api: APIClient, tenant: Tenant) -> None:
    res = api.post("/v1/schedules", d("outside"), format="json")
    assert res.status_code == 201, res.content
    # The downstream first: it is created after the upstream it names.
    body = applied(
        api,
        [
            {"name": "report", "cron": "0 3 * * *", "target": TARGET, "depends_on": ["load"]},
            d("load", depends_on=["outside", "extract"]),
            d("extract"),
        ],
    )
    assert body["summary"]["create"] == 3
    rows = live(tenant)
    assert {s.name for s in rows["report"].depends_on.all()} == {"load"}
    assert {s.name for s in rows["load"].depends_on.all()} == {"outside", "extract"}
    assert rows["report"].next_run_at is None  # fired by its upstream, as POST would
    exported = {e["name"]: e for e in export(api)}
    assert exported["load"]["depends_on"] == ["extract", "outside"]
    assert "depends_on" not in exported["extract"]
    # Removing an upstream is an update of depends_on.
    body = applied(api, [d("load", depends_on=["extract"])])
    assert body["changes"][0]["fields"] == {
        "depends_on": {"before": ["extract", "outside"], "after": ["extract"]}
    }

    before = writes(tenant)
    for schedules, field, words in [
        ([d("x", depends_on=["nope"])], "schedules[0].depends_on", "no schedule named 'nope'"),
        ([d("x", depends_on=["y"]), d("y", depends_on=["x"])], "schedules[0].depends_on", "cycle"),
        ([d("x", depends_on=["x"])], "schedules[0].depends_on", "cycle"),
        # An existing schedule made to depend on its own downstream.
        ([d("extract", depends_on=["report"])], "schedules[0].depends_on", "cycle"),
    ]:
        err = error(apply(api, schedules), 400)
        assert list(err["detail"]) == [field], err
        assert words in err["message"], err
    # Prune would delete the upstream the file names: refused, not left dangling.
    err = error(apply(api, [d("x", depends_on=["outside"])], prune=True), 400)
    assert "prune" in err["message"]
    assert writes(tenant) == before


def test_pause_state_follows_paused_and_is_left_alone_without_it(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("a"), d("b")])
    body = applied(api, [d("a", paused=True), d("b")])
    assert body["changes"][0]["action"] == "update"
    assert body["changes"][0]["fields"] == {"paused": {"before": False, "after": True}}
    assert body["changes"][1]["action"] == "unchanged"
    a = live(tenant)["a"]
    assert a.paused and a.paused_reason == PAUSE_REASON and a.version == 2
    assert AuditEvent.objects.filter(object_id=str(a.id), action="schedule.pause").count() == 1
    # An operator's pause survives an apply that does not say `paused`.
    b = live(tenant)["b"]
    assert (
        api.post(f"/v1/schedules/{b.id}:pause", {"reason": "incident"}, format="json").status_code
        < 300
    )
    body = applied(api, [d("a"), d("b")])
    assert body["summary"]["unchanged"] == 2
    assert live(tenant)["b"].paused_reason == "incident"
    body = applied(api, [d("a", paused=False), d("b", paused=True)])
    assert [c["action"] for c in body["changes"]] == ["update", "unchanged"]
    assert not live(tenant)["a"].paused
    assert AuditEvent.objects.filter(object_id=str(a.id), action="schedule.resume").count() == 1


def test_another_tenants_schedule_of_the_same_name_is_untouched_and_invisible(
    api: APIClient, outsider_api: APIClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    applied(outsider_api, [d("shared"), d("theirs")])
    before = writes(other_tenant)
    body = applied(api, [d("shared", jitter_s=7, version=None)], prune=True)
    assert body["summary"] == {"create": 1, "update": 0, "unchanged": 0, "delete": 0}
    assert writes(other_tenant) == before
    assert [e["name"] for e in export(api)] == ["shared"]
    assert sorted(e["name"] for e in export(outsider_api)) == ["shared", "theirs"]
    # Their name is not an upstream we can name.
    err = error(apply(api, [d("x", depends_on=["theirs"])]), 400)
    assert "no schedule named 'theirs'" in err["message"]


def test_roles(api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant) -> None:
    viewer = api_for(tenant, Role.VIEWER)
    assert error(apply(viewer, [d("a")]), 403)["code"] == "forbidden"
    assert error(apply(viewer, [d("a")], dry_run=True), 403)["code"] == "forbidden"
    assert not Schedule.objects.filter(tenant=tenant).exists()
    operator = api_for(tenant, Role.OPERATOR)
    assert applied(operator, [d("a")])["summary"]["create"] == 1
    assert [e["name"] for e in export(viewer)] == ["a"]


def _world(api: APIClient) -> None:
    """A tenant holding every kind of definition, made through POST /v1/schedules (so
    the export's defaults are measured against create's, not against apply's)."""
    made = {}
    for body in [
        d("cron-plain"),
        d(
            "cron-full",
            cron="*/15 8-18 * * MON-FRI",
            timezone="Europe/Amsterdam",
            retry={"max_attempts": 5, "backoff": "fixed", "initial_s": 30, "max_s": 30},
            concurrency="allow",
            misfire="catch_up",
            misfire_grace_s=300,
            catch_up_limit=3,
            jitter_s=20,
            priority="high",
            duration="long",
            target=TARGET | {"method": "PUT", "headers": {"X-Team": "billing"}, "timeout_s": 60},
        ),
        {"name": "once", "run_at": "2030-09-26T11:00:00+02:00", "target": TARGET},
        d("hashed", cron="H H(0-5) * * *"),
        d("paused"),
    ]:
        res = api.post("/v1/schedules", body, format="json")
        assert res.status_code == 201, res.content
        made[body["name"]] = res.json()["id"]
    res = api.post(
        "/v1/schedules",
        d("with-deps", depends_on=[made["cron-plain"], made["once"]]),
        format="json",
    )
    assert res.status_code == 201, res.content
    assert api.post(f"/v1/schedules/{made['paused']}:pause", {}, format="json").status_code < 300


def test_export_is_minimal_and_apply_of_it_is_all_unchanged(api: APIClient, tenant: Tenant) -> None:
    _world(api)
    # One-offs of /v1/jobs are not definitions.
    assert (
        api.post("/v1/jobs", {"run_at": LATER, "target": TARGET}, format="json").status_code < 300
    )
    exported = export(api)
    by_name = {e["name"]: e for e in exported}
    assert [e["name"] for e in exported] == sorted(by_name)
    assert set(by_name) == {"cron-full", "cron-plain", "hashed", "once", "paused", "with-deps"}
    # Only what differs from the defaults (the target as stored, defaults filled).
    assert set(by_name["cron-plain"]) == {"name", "cron", "target"}
    assert by_name["cron-plain"]["target"]["url"] == TARGET["url"]
    assert by_name["once"] == {
        "name": "once",
        "run_at": "2030-09-26T09:00:00Z",
        "target": by_name["cron-plain"]["target"],
    }
    assert by_name["hashed"]["cron"] == "H H(0-5) * * *"
    assert by_name["paused"]["paused"] is True
    assert "paused" not in by_name["cron-plain"]
    assert by_name["with-deps"]["depends_on"] == ["cron-plain", "once"]
    assert set(by_name["cron-full"]) == {
        "name",
        "cron",
        "timezone",
        "target",
        "retry",
        "concurrency",
        "misfire",
        "misfire_grace_s",
        "catch_up_limit",
        "jitter_s",
        "priority",
        "duration",
    }
    full = by_name["cron-full"]
    assert full["retry"] == {"max_attempts": 5, "backoff": "fixed", "initial_s": 30, "max_s": 30}
    assert (full["timezone"], full["jitter_s"], full["duration"]) == (
        "Europe/Amsterdam",
        20,
        "long",
    )
    assert full["target"]["headers"] == {"X-Team": "billing"}
    before = writes(tenant)
    body = applied(api, exported, prune=True)
    assert body["summary"] == {"create": 0, "update": 0, "unchanged": 6, "delete": 0}
    assert writes(tenant) == before
    hashed = next(c for c in body["changes"] if c["name"] == "hashed")
    assert hashed["next_runs"]["before"] == hashed["next_runs"]["after"]
    assert len(hashed["next_runs"]["after"]) == NEXT_RUNS


def test_an_edit_through_apply_withdraws_staged_rows_as_patch_does(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("a", cron="* * * * *"), d("b", cron="* * * * *")])
    rows = live(tenant)
    staged = {
        name: execution_row(rows[name], rows[name].next_run_at, trigger=Trigger.CRON)
        for name in ("a", "b")
    }
    # The manual run of a is asked for as it is: never withdrawn.
    manual = execution_row(
        rows["a"], rows["a"].next_run_at + timedelta(seconds=1), trigger=Trigger.MANUAL
    )
    body = applied(api, [d("a", cron="*/5 * * * *"), d("b", cron="* * * * *")])
    assert [c["action"] for c in body["changes"]] == ["update", "unchanged"]
    assert not Execution.objects.filter(pk=staged["a"].pk).exists()
    assert Execution.objects.filter(pk=staged["b"].pk).exists()
    assert Execution.objects.filter(pk=manual.pk).exists()
    replanned = ExecutionEvent.objects.filter(schedule=rows["a"], kind=EventKind.REPLANNED)
    assert replanned.count() == 1
    assert "1 staged occurrence withdrawn" in replanned.get().message


def test_1000_definitions_fit_the_body_limit(api: APIClient, tenant: Tenant) -> None:
    # Realistic definitions, a bit longer than most; the last one invalid so the
    # request is checked in full and answers fast without writing 1,000 schedules.
    many = [
        d(
            f"nightly-report-{i:04d}",
            cron="H 2 * * *",
            timezone="Europe/Amsterdam",
            target={
                "type": "http",
                "url": f"https://billing.internal/jobs/report/{i:04d}",
                "method": "POST",
                "timeout_s": 900,
            },
            retry={"max_attempts": 5, "backoff": "exponential", "initial_s": 30},
            misfire="run_once",
            jitter_s=120,
        )
        for i in range(APPLY_MAX)
    ]
    many[-1]["cron"] = "99 * * * *"
    size = len(json.dumps({"schedules": many, "dry_run": True}))
    # Past the ordinary endpoints' limit: only the bulk limit lets it through.
    assert settings.API_MAX_BODY_BYTES < size < settings.API_BULK_MAX_BODY_BYTES, size
    res = apply(api, many, dry_run=True)
    err = error(res, 400)
    assert list(err["detail"]) == [f"schedules[{APPLY_MAX - 1}].cron"]
    res = apply(api, [*many, d("one-too-many")], dry_run=True)
    assert list(error(res, 400)["detail"]) == ["schedules"]
    assert not Schedule.objects.filter(tenant=tenant).exists()


def test_a_chain_of_1000_in_the_file_is_ordered_and_its_cycle_found(
    api: APIClient, tenant: Tenant
) -> None:
    # Each depends on the next, the last on the first: a cycle 1,000 long (no writes).
    chain = [d(f"c{i}", depends_on=[f"c{(i + 1) % APPLY_MAX}"]) for i in range(APPLY_MAX)]
    err = error(apply(api, chain, dry_run=True), 400)
    assert list(err["detail"]) == ["schedules[0].depends_on"], err
    assert "dependency cycle in the file: c0 -> c1 -> c2" in err["message"]
    assert err["message"].endswith("c999 -> c0")
    assert not Schedule.objects.filter(tenant=tenant).exists()
    # Without the closing edge, the upstreams are created first whatever the order.
    body = applied(api, [d("c0", depends_on=["c1"]), d("c1", depends_on=["c2"]), d("c2")])
    assert [c["name"] for c in body["changes"]] == ["c0", "c1", "c2"]
    # Created upstream first (one transaction: the audit rows' order tells).
    ids = {str(s.id): name for name, s in live(tenant).items()}
    created = AuditEvent.objects.filter(tenant=tenant, action="schedule.create").order_by("pk")
    assert [ids[a.object_id] for a in created] == ["c2", "c1", "c0"]


def test_the_openapi_document_describes_both(client: Any) -> None:
    doc = client.get("/v1/openapi.json").json()
    post = doc["paths"]["/v1/schedules:apply"]["post"]
    assert post["operationId"] == "schedules_apply"
    assert "200" in post["responses"]
    get = doc["paths"]["/v1/schedules:export"]["get"]
    assert get["operationId"] == "schedules_export"


@pytest.mark.django_db(transaction=True)
def test_two_applies_racing_on_the_same_names_end_consistent(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(2)]
    names = [f"race-{i}" for i in range(5)]
    wanted = {id(c): [d(n, jitter_s=10 * (k + 1)) for n in names] for k, c in enumerate(clients)}

    def post(client: APIClient) -> tuple[int, dict[str, Any], int]:
        res = apply(client, wanted[id(client)])
        return res.status_code, res.json(), wanted[id(client)][0]["jitter_s"]

    results = at_once(clients, post)
    assert [code for code, _, _ in results] == [200, 200], results
    # They took turns: the first created every name, the second updated each.
    summaries = sorted(
        (body["summary"]["create"], body["summary"]["update"]) for _, body, _ in results
    )
    assert summaries == [(0, 5), (5, 0)], results
    last_jitter = results[-1][2]
    rows = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    assert sorted(rows.values_list("name", flat=True)) == names
    assert set(rows.values_list("jitter_s", flat=True)) == {last_jitter}
    assert set(rows.values_list("version", flat=True)) == {2}
    # The database itself holds at most one live row per name (the partial unique index).
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'schedule_name_unique_live'")
        (indexdef,) = cur.fetchone()
    assert "UNIQUE" in indexdef and "deleted_at IS NULL" in indexdef


def test_an_unchanged_file_costs_the_same_queries_whatever_its_length(api: APIClient) -> None:
    from django.test.utils import CaptureQueriesContext

    few = [d(f"few-{i}", depends_on=["few-0"] if i else []) for i in range(3)]
    many = few + [d(f"many-{i}", depends_on=["few-0"]) for i in range(30)]
    applied(api, many)
    counted = []
    for schedules in (few, many):
        with CaptureQueriesContext(connection) as queries:
            body = applied(api, schedules)
        assert body["summary"]["unchanged"] == len(schedules)
        counted.append(len(queries.captured_queries))
    # Each schedule's preview reads its calendar links: one query per item, exactly;
    # nothing else grows with the file.
    extra = len(many) - len(few)
    assert counted[1] - counted[0] == extra, counted


def test_calendars_are_definition_fields(api: APIClient, tenant: Tenant) -> None:
    for name in ("holidays", "stocktake"):
        res = api.post(
            "/v1/calendars",
            {"name": name, "sources": [{"type": "dates", "dates": ["2030-01-02"]}]},
            format="json",
        )
        assert res.status_code == 201, res.content
    body = applied(api, [d("a", exclude_calendars=["holidays"]), d("b")])
    assert body["summary"]["create"] == 2
    exported = {e["name"]: e for e in export(api)}
    assert exported["a"]["exclude_calendars"] == ["holidays"]
    assert "exclude_calendars" not in exported["b"] and "only_calendars" not in exported["b"]
    before = writes(tenant)
    assert applied(api, list(exported.values()), prune=True)["summary"]["unchanged"] == 2
    assert writes(tenant) == before
    body = applied(api, [d("a", exclude_calendars=["stocktake"]), d("b", jitter_s=1)])
    assert body["changes"][0]["fields"] == {
        "exclude_calendars": {"before": ["holidays"], "after": ["stocktake"]}
    }
    assert set(body["changes"][1]["fields"]) == {"jitter_s"}
    assert export(api)[0]["exclude_calendars"] == ["stocktake"]
    # Left out of the file: no calendars (the default), as any other field.
    body = applied(api, [d("a")])
    assert set(body["changes"][0]["fields"]) == {"exclude_calendars"}
    err = error(apply(api, [d("c", only_calendars=["nope"])]), 400)
    assert list(err["detail"]) == ["schedules[0].only_calendars"], err


@pytest.mark.django_db(transaction=True)
def test_a_patch_racing_an_apply_is_never_lost(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(2)]
    applied(clients[0], [d("a")])
    a = live(tenant)["a"]

    def go(client: APIClient) -> tuple[str, int, Any]:
        if client is clients[0]:
            res = client.patch(
                f"/v1/schedules/{a.id}", {"priority": "high", "version": 1}, format="json"
            )
            return "patch", res.status_code, res.json()
        res = apply(client, [d("a", jitter_s=9)])
        return "apply", res.status_code, res.json()

    results = {kind: (code, body) for kind, code, body in at_once(clients, go)}
    apply_code, apply_body = results["apply"]
    patch_code, _ = results["patch"]
    assert apply_code == 200, apply_body
    final = live(tenant)["a"]
    change = apply_body["changes"][0]
    if patch_code == 409:
        # The apply went first: the PATCH made on version 1 is refused, not applied over it.
        assert change["fields"] == {"jitter_s": {"before": 0, "after": 9}}
        assert (final.version, final.jitter_s, final.priority) == (2, 9, "default")
    else:
        # The PATCH went first: the apply compared against it and set the file's values.
        assert patch_code == 200
        assert change["fields"] == {
            "jitter_s": {"before": 0, "after": 9},
            "priority": {"before": "high", "after": "default"},
        }
        assert (final.version, final.jitter_s, final.priority) == (3, 9, "default")
    assert change["version"] == final.version


def test_a_concurrency_key_round_trips_through_export_and_apply(
    api: APIClient, tenant: Tenant
) -> None:
    target = TARGET | {"body": {"customer_id": 42}}
    key = {"key": "customer-{target.body.customer_id}"}
    applied(api, [d("a", target=target, concurrency_key=key), d("b")])
    exported = {s["name"]: s for s in export(api)}
    assert exported["a"]["concurrency_key"] == key | {"limit": 1, "on_conflict": "queue"}
    assert "concurrency_key" not in exported["b"]  # the default (none) is left out
    assert applied(api, list(exported.values()))["summary"]["unchanged"] == 2
    assert live(tenant)["a"].concurrency_key["rendered"] == "customer-42"
    body = applied(api, [d("a", target=target, concurrency_key=key | {"limit": 2}), d("b")])
    assert body["changes"][0]["fields"]["concurrency_key"]["after"]["limit"] == 2
    body = applied(api, [d("a", target=target), d("b")])  # left out: none
    assert body["changes"][0]["fields"]["concurrency_key"]["after"] is None
    assert live(tenant)["a"].concurrency_key is None
