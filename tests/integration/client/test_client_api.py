"""The Python client (clients/python) against a live gunicorn: every endpoint it
wraps, keyset paging across pages, and the typed errors of the API's envelope."""

from __future__ import annotations

import dataclasses
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tenants.roles import Role
from tests.support.client_support import (
    Recorder,
    Tenant,
    definition,
    extra_token,
    make_tenant,
)
from tests.support.procs import WebServer

from scheduler_client import (  # isort: skip  (clients/python is put on sys.path above)
    Client,
    Conflict,
    Forbidden,
    NotFound,
    PreconditionRequired,
    Unauthorized,
    ValidationError,
)
from scheduler_client import config  # isort: skip
from scheduler_client.models import Evidence, Execution, Explanation, Job, Schedule  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _soon(days: int = 1) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat().replace("+00:00", "Z")


def test_a_schedule_through_its_whole_life(client: Client) -> None:
    created = client.create_schedule(definition("nightly-report", "30 2 * * *"))
    assert isinstance(created, Schedule)
    assert created.name == "nightly-report" and created.cron == "30 2 * * *"
    assert created.version == 1 and created.paused is False and created.id

    got = client.get_schedule(created.id)
    assert got.id == created.id and got.timezone == "Europe/Amsterdam"
    assert got.health is not None  # the detail carries the health object
    assert [s.id for s in client.list_schedules()] == [created.id]
    assert client.find_schedule("nightly-report").id == created.id  # by name too

    edited = client.update_schedule(created.id, {"jitter_s": 30}, version=created.version or 0)
    assert edited.jitter_s == 30 and edited.version == 2

    paused = client.pause_schedule(created.id, reason="deploy freeze")
    assert paused.paused is True and paused.paused_reason == "deploy freeze"
    assert client.resume_schedule(created.id).paused is False

    execution = client.trigger_schedule(created.id)
    assert isinstance(execution, Execution)
    assert execution.schedule_id == created.id and execution.trigger == "manual"

    preview = client.preview_schedule(created.id, count=3, start="2026-03-28T00:00:00Z")
    times = [item["scheduled_for"] for item in preview["occurrences"]]
    # 02:30 does not exist in Amsterdam on 29 March 2026: it runs at 03:00 CEST (01:00Z).
    assert times == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]

    answer = client.explain(created.id, "2026-03-29T01:00:00Z")
    assert isinstance(answer, Explanation)
    assert answer.code and answer.sentence and answer.at == "2026-03-29T01:00:00Z"
    assert all(e.kind and e.id for e in answer.evidence)

    client.delete_schedule(created.id)
    with pytest.raises(NotFound):
        client.get_schedule(created.id)


def test_keyset_paging_walks_every_page(server: WebServer, owner: Tenant) -> None:
    recorder = Recorder()
    with Client(server.url, owner.token, transport=recorder) as client:
        made = {client.create_schedule(definition(f"s{i:02d}")).id for i in range(7)}
        listed = [s.id for s in client.list_schedules(page_size=3)]
    assert len(listed) == 7 and set(listed) == made  # each once, none lost between pages
    pages = [e for e in recorder.exchanges if e.method == "GET"]
    assert len(pages) == 3  # 3 + 3 + 1


def test_runs_jobs_and_their_pages(client: Client) -> None:
    schedule = client.create_schedule(definition("hourly", "0 * * * *"))
    triggered = [client.trigger_schedule(schedule.id).id for _ in range(3)]
    runs = list(client.list_executions(schedule_id=schedule.id, page_size=2))
    assert sorted(r.id for r in runs) == sorted(triggered)
    assert list(client.list_executions(schedule_id=schedule.id, state=["succeeded"])) == []

    one = client.get_execution(triggered[0])
    assert one.timeline and one.timeline[0]["kind"]
    cancelled = client.cancel_execution(triggered[0], reason="not needed")
    assert cancelled.state == "cancelled"

    body = {"name": "reminder", "run_at": _soon(), "target": definition("x")["target"]}
    job = client.create_job(body | {"idempotency_key": "remind-u42"})
    again = client.create_job(body | {"idempotency_key": "remind-u42"})
    assert isinstance(job, Job) and again.id == job.id  # same key, same body: the same job
    assert [j.id for j in client.list_jobs()] == [job.id]
    assert client.get_job(job.id).name == "reminder"
    batch = client.create_jobs(
        [body | {"name": f"reminder-{i}", "idempotency_key": f"k{i}"} for i in range(3)]
    )
    assert batch["created"] == 3 and len(batch["results"]) == 3
    assert client.cancel_job(job.id).id == job.id
    with pytest.raises(NotFound):  # cancelled before it fired: the job is gone
        client.get_job(job.id)


def test_errors_are_typed_and_carry_the_envelope(
    server: WebServer, client: Client, owner: Tenant
) -> None:
    outsider = make_tenant("outsider")
    theirs = Client(server.url, outsider.token).create_schedule(definition("theirs"))
    with pytest.raises(NotFound) as not_found:
        client.get_schedule(theirs.id)  # another tenant's schedule does not exist for us
    assert not_found.value.status == 404 and not_found.value.code == "not_found"

    mine = client.create_schedule(definition("mine"))
    client.update_schedule(mine.id, {"jitter_s": 5}, version=1)
    with pytest.raises(Conflict) as stale:
        client.update_schedule(mine.id, {"jitter_s": 9}, version=1)
    assert stale.value.status == 409
    assert client.get_schedule(mine.id).jitter_s == 5  # nothing written

    with pytest.raises(ValidationError) as invalid:
        client.create_schedule(definition("bad", "0 99 * * *"))
    assert invalid.value.status == 400 and "cron" in invalid.value.detail
    assert "cron" in str(invalid.value) and "99" in str(invalid.value)

    with pytest.raises(PreconditionRequired) as precondition:
        client.request("PATCH", f"/v1/schedules/{mine.id}", json={"jitter_s": 1})
    assert precondition.value.status == 428 and "If-Match" in precondition.value.detail

    with pytest.raises(Unauthorized) as unauthorized:
        Client(server.url, "not-a-token").get_schedule(mine.id)
    assert unauthorized.value.status == 401

    viewer = Client(server.url, extra_token(owner.slug, Role.VIEWER))
    assert viewer.get_schedule(mine.id).id == mine.id
    with pytest.raises(Forbidden):
        viewer.create_schedule(definition("viewer-made"))


def test_unknown_fields_of_a_newer_server_are_ignored(client: Client) -> None:
    raw = client.request("POST", "/v1/schedules", json=definition("compat"))
    newer = raw | {"labels": {"team": "billing"}, "owner": {"kind": "team"}}
    schedule = Schedule.from_json(newer)
    assert schedule.id == raw["id"] and schedule.raw["labels"] == {"team": "billing"}
    older = {k: v for k, v in raw.items() if k != "health"}
    assert Schedule.from_json(older).health is None


def test_from_env_reads_the_environment_then_the_login_file(
    server: WebServer, owner: Tenant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(config.URL_ENV, raising=False)
    monkeypatch.delenv(config.TOKEN_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    with pytest.raises(ValueError, match="schedctl login"):
        Client.from_env()

    path = config.write_file(server.url, owner.token)
    assert path == tmp_path / "xdg" / "schedctl" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with Client.from_env() as client:
        assert list(client.list_schedules()) == []
    assert owner.token not in repr(config.load())

    monkeypatch.setenv(config.TOKEN_ENV, "from-the-environment")  # the environment wins
    with Client.from_env() as client, pytest.raises(Unauthorized):
        list(client.list_schedules())


def test_the_models_match_the_servers_openapi_document(server: WebServer) -> None:
    """The hand-written models name only fields the server documents (so a rename on
    the server fails here, not in a user's terminal)."""
    status, _, body = server.request("GET", "/v1/openapi.json")
    assert status == 200
    document = json.loads(body)
    schemas = document["components"]["schemas"]
    for model, component in [
        (Schedule, "ScheduleOutDoc"),
        (Job, "JobOutDoc"),
        (Execution, "ExecutionDetailDoc"),
        (Explanation, "ExplanationDoc"),
        (Evidence, "EvidenceDoc"),
    ]:
        documented = set(schemas[component]["properties"])
        named = {f.name for f in dataclasses.fields(model)} - {"raw"}
        if model is Schedule or model is Job:
            named -= {"health"}  # GET /v1/schedules/{id} only: ScheduleWithHealthDoc
            assert "health" in schemas["ScheduleWithHealthDoc"]["properties"]
        assert named <= documented, f"{model.__name__}: {sorted(named - documented)}"
    for path, method in [
        ("/v1/schedules", "get"),
        ("/v1/schedules", "post"),
        ("/v1/schedules/{id}", "patch"),
        ("/v1/schedules/{id}:pause", "post"),
        ("/v1/schedules/{id}/explain", "get"),
        ("/v1/schedules:apply", "post"),
        ("/v1/schedules:export", "get"),
        ("/v1/jobs:batch", "post"),
        ("/v1/executions", "get"),
        ("/v1/executions/{id}:cancel", "post"),
    ]:
        assert method in document["paths"][path], (method, path)


def test_a_concurrency_key_through_the_client(client: Client) -> None:
    body = definition("invoices") | {
        "target": {"type": "http", "url": "https://billing.internal/x", "body": {"c": 42}},
        "concurrency_key": {"key": "customer-{target.body.c}", "on_conflict": "skip"},
    }
    created = client.create_schedule(body)
    assert created.concurrency_key == {
        "key": "customer-{target.body.c}",
        "limit": 1,
        "on_conflict": "skip",
    }
    with pytest.raises(ValidationError) as err:
        client.create_schedule(body | {"name": "bad", "concurrency_key": {"key": "{target.x}"}})
    assert err.value.status == 400 and "concurrency_key.key" in err.value.detail
