"""POST /v1/jobs:batch: up to 1,000 one-off jobs per request, each with its own
idempotency key, per-item results in request order, set-based writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dispatch.models import ExecutionEvent, Schedule
from dispatch.partitioning import partition_for
from dispatch.services.jobs import BATCH_MAX
from tenants.models import AuditEvent, Tenant, TenantQuota
from tenants.roles import Role
from tests.support.concurrency import at_once

TARGET = {"type": "http", "url": "https://notify.internal/remind"}
LATER = "2030-09-26T09:00:00Z"


def job(key: str, **more: Any) -> dict[str, Any]:
    return {"run_at": LATER, "target": TARGET, "idempotency_key": key} | more


def batch(client: APIClient, jobs: Any) -> Any:
    return client.post("/v1/jobs:batch", {"jobs": jobs}, format="json")


@pytest.mark.django_db
def test_per_item_results_in_request_order(api: APIClient, tenant: Tenant) -> None:
    assert api.post("/v1/jobs", job("old"), format="json").status_code == 201
    assert api.post("/v1/jobs", job("taken"), format="json").status_code == 201
    jobs = [
        job("a"),
        job("old"),  # same key, same body as POST /v1/jobs: the same job
        job("taken", run_at="2030-09-27T09:00:00Z"),  # same key, other body
        job("bad-url", target={"type": "http", "url": "ftp://x.internal/"}),
        {"run_at": LATER, "target": TARGET},  # no key
        job("bad-when", run_at="soon"),
        "not an object",
        job("b", name="reminder-b", retry={"max_attempts": 3}),
    ]
    res = batch(api, jobs)
    assert res.status_code == 200, res.content
    body = res.json()
    statuses = [r["status"] for r in body["results"]]
    assert statuses == [201, 200, 409, 400, 400, 400, 400, 201]
    assert [r["index"] for r in body["results"]] == list(range(len(jobs)))
    assert (body["created"], body["existing"], body["failed"]) == (2, 1, 5)
    errors = [r["error"] for r in body["results"]]
    assert errors[2]["code"] == "idempotency_conflict"
    assert list(errors[2]["detail"]) == ["jobs[2].idempotency_key"]
    assert list(errors[3]["detail"]) == ["jobs[3].target.url"]
    assert list(errors[4]["detail"]) == ["jobs[4].idempotency_key"]
    assert list(errors[5]["detail"]) == ["jobs[5].run_at"]
    assert list(errors[6]["detail"]) == ["jobs[6]"]
    assert errors[3]["message"].startswith("jobs[3].target.url: ")
    created = body["results"][7]["job"]
    assert created["name"] == "reminder-b" and created["next_run_at"] == LATER
    assert created["retry"]["max_attempts"] == 3 and created["tenant"] == "billing"
    old = Schedule.objects.get(tenant=tenant, idempotency_key="old")
    assert body["results"][1]["job"]["id"] == str(old.id)
    # Stored as POST /v1/jobs stores a job: the beat's partition, an audit row and a
    # timeline event per job, linked by id.
    for key in ("a", "b"):
        s = Schedule.objects.get(tenant=tenant, idempotency_key=key)
        assert s.partition == partition_for(s.id) and s.next_run_at == s.run_at
        audit = AuditEvent.objects.get(object_id=str(s.id), action="job.create")
        assert audit.after["idempotency_key"] == key and audit.tenant_id == tenant.id
        event = ExecutionEvent.objects.get(schedule=s, kind="created")
        assert event.data["audit_id"] == audit.pk
    assert Schedule.objects.filter(tenant=tenant).count() == 4

    # The whole request again (a client retrying after a timeout): nothing new.
    again = batch(api, jobs).json()
    assert [r["status"] for r in again["results"]] == [200, 200, 409, 400, 400, 400, 400, 200]
    assert again["results"][0]["job"]["id"] == body["results"][0]["job"]["id"]
    assert Schedule.objects.filter(tenant=tenant).count() == 4


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"jobs": []}, "jobs"),
        ({"jobs": {"a": 1}}, "jobs"),
        ({}, "jobs"),
        ({"jobs": [job("x")], "extra": 1}, "extra"),
        ([job("x")], "non_field_errors"),
        ({"jobs": [job("x")] * (BATCH_MAX + 1)}, "jobs"),
        (
            {"jobs": [job("x"), job("y"), job("x", run_at="2031-01-01T00:00:00Z")]},
            "jobs[2].idempotency_key",
        ),
    ],
)
def test_request_shape_errors_are_400_and_save_nothing(
    api: APIClient, payload: Any, field: str
) -> None:
    res = api.post("/v1/jobs:batch", payload, format="json")
    assert res.status_code == 400, res.content
    assert field in res.json()["error"]["detail"]
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_a_thousand_jobs_fit_in_one_request_with_a_fixed_number_of_queries(
    api: APIClient, tenant: Tenant
) -> None:
    jobs = [
        job(
            f"remind-user-{n:06}-2026-09-26",
            target=TARGET | {"body": {"user": n, "kind": "remind"}},
        )
        for n in range(BATCH_MAX)
    ]
    raw = json.dumps({"jobs": jobs})
    assert settings.API_MAX_BODY_BYTES < len(raw) < settings.API_BULK_MAX_BODY_BYTES
    api.get("/v1/jobs")  # warm: the token's last-use write is not the batch's
    with CaptureQueriesContext(connection) as captured:
        res = api.post("/v1/jobs:batch", raw, content_type="application/json")
    assert res.status_code == 200, res.content
    assert res.json()["created"] == BATCH_MAX
    # Set-based: the token, the key lookup, now(), the quota lock and count, one
    # statement for the jobs with their audit rows, events and wake-up, the savepoint
    # pair; never one statement per job.
    assert len(captured.captured_queries) <= 8, [q["sql"][:80] for q in captured]
    assert Schedule.objects.filter(tenant=tenant).count() == BATCH_MAX
    assert AuditEvent.objects.filter(tenant=tenant, action="job.create").count() == BATCH_MAX
    assert ExecutionEvent.objects.filter(tenant=tenant, kind="created").count() == BATCH_MAX


@pytest.mark.django_db
def test_quota_is_checked_once_for_the_batch_and_earlier_items_win(
    api: APIClient, tenant: Tenant
) -> None:
    TenantQuota.objects.filter(tenant=tenant).update(max_schedules=3)
    assert api.post("/v1/jobs", job("first"), format="json").status_code == 201
    res = batch(api, [job(f"k{n}") for n in range(4)]).json()
    assert [r["status"] for r in res["results"]] == [201, 201, 422, 422]
    assert res["results"][2]["error"]["code"] == "quota_exceeded"
    assert Schedule.objects.filter(tenant=tenant).count() == 3


@pytest.mark.django_db
def test_rbac_and_tenant_isolation(
    api_for: Callable[[Tenant, Role], APIClient],
    tenant: Tenant,
    other_tenant: Tenant,
    outsider_api: APIClient,
) -> None:
    viewer = api_for(tenant, Role.VIEWER)
    assert batch(viewer, [job("v")]).status_code == 403
    assert not Schedule.objects.exists()
    operator = api_for(tenant, Role.OPERATOR)
    mine = batch(operator, [job("shared")]).json()["results"][0]
    # The same key in another tenant is another job, not a 200 with ours.
    theirs = batch(outsider_api, [job("shared")]).json()["results"][0]
    assert mine["status"] == theirs["status"] == 201 and mine["job"]["id"] != theirs["job"]["id"]
    assert theirs["job"]["tenant"] == "outsider"
    wrong = batch(operator, [job("t", tenant="outsider")]).json()["results"][0]
    assert wrong["status"] == 400 and "jobs[0].tenant" in wrong["error"]["detail"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_with_overlapping_keys_create_each_job_once(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    # Each batch shares half its keys with the next: every key is created exactly once,
    # and the batches that lost a key answer 200 for it (same body), none a 500.
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(4)]
    work = {id(c): [job(f"k{(n + 10 * i) % 40}") for n in range(20)] for i, c in enumerate(clients)}

    def post(client: APIClient) -> tuple[int, list[int]]:
        res = batch(client, work[id(client)])
        return res.status_code, [r["status"] for r in res.json()["results"]]

    results = at_once(clients, post)
    assert all(code == 200 for code, _ in results), results
    assert all(set(statuses) <= {200, 201} for _, statuses in results), results
    assert sum(statuses.count(201) for _, statuses in results) == 40
    assert Schedule.objects.filter(tenant=tenant).count() == 40


@pytest.mark.django_db
def test_a_refused_url_is_refused_in_every_item_that_names_it(
    api: APIClient, tenant: Tenant
) -> None:
    # Each distinct URL is checked once per request; a refused one is not remembered
    # as checked: every item naming it is refused, naming its own path.
    metadata = {"type": "http", "url": "http://169.254.169.254/latest/meta-data"}
    loopback = {"type": "http", "url": "http://127.0.0.1:8080/admin"}
    jobs = [
        job("ok-0"),
        job("meta-1", target=metadata),
        job("ok-2", target=TARGET | {"body": {"n": 2}}),
        job("loop-3", target=loopback),
        job("meta-4", target=metadata | {"body": "again"}),
        job("ok-5"),
    ]
    res = batch(api, jobs).json()
    assert [r["status"] for r in res["results"]] == [201, 400, 201, 400, 400, 201]
    for index in (1, 3, 4):
        detail = res["results"][index]["error"]["detail"]
        assert list(detail) == [f"jobs[{index}].target.url"], detail
    # Nothing of a refused item is stored: no job, no audit row, no event.
    stored = set(Schedule.objects.filter(tenant=tenant).values_list("idempotency_key", flat=True))
    assert stored == {"ok-0", "ok-2", "ok-5"}
    assert AuditEvent.objects.filter(tenant=tenant, action="job.create").count() == 3
    assert ExecutionEvent.objects.filter(tenant=tenant, kind="created").count() == 3


@pytest.mark.django_db
def test_a_url_accepted_by_one_request_is_checked_again_by_the_next(
    api: APIClient, tenant: Tenant
) -> None:
    # The per-request memory of accepted URLs ends with the request: once the tenant's
    # allow-list no longer admits the private address, the next batch refuses it.
    private = {"type": "http", "url": "http://10.20.30.40/hook"}
    Tenant.objects.filter(pk=tenant.pk).update(egress_allow=["10.20.30.0/24"])
    first = batch(api, [job("p-0", target=private), job("p-1", target=private)]).json()
    assert [r["status"] for r in first["results"]] == [201, 201]
    Tenant.objects.filter(pk=tenant.pk).update(egress_allow=[])
    second = batch(api, [job("p-2", target=private)]).json()
    assert [r["status"] for r in second["results"]] == [400]
    assert list(second["results"][0]["error"]["detail"]) == ["jobs[0].target.url"]
    assert Schedule.objects.filter(tenant=tenant).count() == 2


@pytest.mark.django_db
def test_mixed_batch_answers_each_key_by_its_stored_body(api: APIClient, tenant: Tenant) -> None:
    first = batch(api, [job(f"m{n}", target=TARGET | {"body": {"n": n}}) for n in range(4)])
    assert first.json()["created"] == 4
    jobs = [
        job("m0", target=TARGET | {"body": {"n": 0}}),  # same body: 200, the same job
        job("m1", target=TARGET | {"body": {"n": 99}}),  # other body: 409
        job("m4", target=TARGET | {"body": {"n": 4}}),  # new: 201
        job("m5", target={"type": "http", "url": "gopher://x.internal/"}),  # invalid: 400
        job("m3", target=TARGET | {"body": {"n": 3}}),  # same body: 200
    ]
    res = batch(api, jobs).json()
    assert [r["status"] for r in res["results"]] == [200, 409, 201, 400, 200]
    ids = {r["idempotency_key"]: r["job"]["id"] for r in first.json()["results"]}
    assert res["results"][0]["job"]["id"] == ids["m0"]
    assert res["results"][4]["job"]["id"] == ids["m3"]
    assert list(res["results"][1]["error"]["detail"]) == ["jobs[1].idempotency_key"]
    assert list(res["results"][3]["error"]["detail"]) == ["jobs[3].target.url"]
    # The conflicting item changed nothing stored under its key; the invalid one stored nothing.
    m1 = Schedule.objects.get(tenant=tenant, idempotency_key="m1")
    assert m1.target["body"] == {"n": 1}
    assert not Schedule.objects.filter(tenant=tenant, idempotency_key="m5").exists()
    assert Schedule.objects.filter(tenant=tenant).count() == 5


@pytest.mark.django_db
def test_each_item_is_validated_and_answered_as_post_jobs_does(
    api: APIClient, tenant: Tenant
) -> None:
    # The batch validates items field by field and reuses a value a field already
    # accepted in the request; POST /v1/jobs runs the whole serializer. Every item is
    # sent to both: the same errors under the same fields, and for a valid item the same
    # job (POST /v1/jobs answers 200, so the validated data hashed to the same digest)
    # with the same body as the batch answered when it created it.
    full = {
        "name": "full",
        "tenant": "billing",
        "timezone": "Europe/Amsterdam",
        "retry": {"max_attempts": 3, "backoff": "fixed"},
        "priority": "high",
        "duration": "long",
        "concurrency_key": {"key": "c-{name}", "limit": 2},
        "misfire": "run_once",
        "misfire_grace_s": 30,
        "delete_after": "1h",
    }
    jobs: list[Any] = [
        job("v-full", **full),
        job("v-same", **full | {"name": "full-2"}),  # every scalar value seen before
        job("v-plain"),
        job("v-null", run_at=None, concurrency_key=None, delete_after=None),
        job(" v-strip "),  # the key as the serializer trims it
        job("v-int", misfire_grace_s="45"),  # a number as text, as DRF reads it
        job("e-two", priority="urgent", misfire_grace_s="x"),  # both fields named
        job("e-after", **full | {"priority": "nope"}),  # a seen value, then a wrong one
        job("e-naive", run_at="2030-09-26T09:00:00"),
        job("e-ctrl\x01"),
        job("e-unknown", priority="bogus", colour="red"),
        job("e-ro", version=3),
        job("e-null", target=None),
        job("e-blank", name=""),
        job("e-bool", misfire_grace_s=True),
        job("e-far", run_at="9999-01-01T00:00:00Z"),
        {"run_at": LATER, "idempotency_key": "e-no-target"},
        job("e-meaning", retry={"max_attempts": 0}),  # valid shape, wrong meaning
    ]
    res = batch(api, jobs)
    assert res.status_code == 200, res.content
    results = res.json()["results"]
    for index, (item, result) in enumerate(zip(jobs, results, strict=True)):
        single = api.post("/v1/jobs", item, format="json")
        if result["status"] == 201:
            assert single.status_code == 200, (index, single.content)
            assert single.json() == result["job"], index
            continue
        assert single.status_code == result["status"] == 400, (index, single.content)
        prefix = f"jobs[{index}]."
        batch_detail = {k.removeprefix(prefix): v for k, v in result["error"]["detail"].items()}
        assert batch_detail == single.json()["error"]["detail"], index
    statuses = [r["status"] for r in results]
    assert statuses == [201] * 6 + [400] * 12, statuses
    assert list(results[6]["error"]["detail"]) == ["jobs[6].priority", "jobs[6].misfire_grace_s"]
    assert Schedule.objects.filter(tenant=tenant).count() == 6
