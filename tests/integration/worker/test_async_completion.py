"""Async completion (dispatch/completion.py): a real worker hands attempts off to the
docs' reference receiver (docs/examples/completion_receiver.py, a real process), which
answers 202 and calls back on a real web server with the scheduler_client helper —
heartbeats, success with an output, failures retried by the policy or not, a service
that vanishes (the lease lapses, the sweeper retries) — and the callbacks' refusals:
a stale attempt (409, recorded), a missing, forged or foreign capability (401), a bad
body (400 naming the field). A queue target hands off the same way."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from itertools import pairwise
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from kombu import Connection
from scheduler_client import Client, Completion, Conflict

from dispatch import completion, selectors, services
from dispatch.exceptions import InvalidSchedule
from dispatch.explain.reasons import explain
from dispatch.models import Alert, AlertChannel, Execution, ExecutionEvent
from dispatch.scheduler import sweeper
from dispatch.states import AlertKind
from dispatch.timing import retry
from tenants import services as tenant_services
from tenants.roles import Principal, Role
from tests.support.ledger import Ledger
from tests.support.net import free_port
from tests.support.procs import ROOT, Proc, WebServer, processes
from tests.support.rows import execution_row
from tests.support.worker_support import (
    ONE_SHOT,
    Pump,
    db_now,
    make_execution,
    make_schedule,
    publish,
    run_to_end,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECEIVER = ROOT / "docs" / "examples" / "completion_receiver.py"
TWO_TRIES = {"max_attempts": 2, "backoff": "fixed", "initial_s": 1, "max_s": 1}


@pytest.fixture(scope="module")
def receiver_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def receiver(receiver_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The tenant's service: the docs' reference receiver, a real process."""
    with processes(tmp_path_factory.mktemp("receiver")) as start:
        yield start("receiver", [sys.executable, str(RECEIVER), "--port", str(receiver_port)])


@pytest.fixture(scope="module")
def worker_settings(platform_url: str, receiver_port: int) -> dict[str, Any]:
    return {
        "concurrency": 2,
        "TARGET_TEST_ALLOW": f"127.0.0.1:{receiver_port}",
        "PLATFORM_URL": platform_url,
    }


@pytest.fixture
def up(web: WebServer, receiver: Proc, worker: Proc, settings: Any, platform_url: str) -> WebServer:
    # This process names callback URLs as the web and the worker do.
    settings.PLATFORM_URL = platform_url
    return web


def target(
    port: int, plan: dict[str, Any], *, heartbeat_s: int = 5, path: str = "/report"
) -> dict[str, Any]:
    return {
        "type": "http",
        "url": f"http://127.0.0.1:{port}{path}",
        "method": "POST",
        "headers": {},
        "body": plan,
        "timeout_s": 60,
        "completion": "callback",
        "heartbeat_s": heartbeat_s,
    }


def events(execution: Execution) -> list[ExecutionEvent]:
    return list(ExecutionEvent.objects.filter(execution_id=execution.id).order_by("id"))


def of_kind(execution: Execution, kind: str) -> list[ExecutionEvent]:
    return [e for e in events(execution) if e.kind == kind]


# --- the hand-off and its endings ------------------------------------------------------


def test_a_handed_off_run_heartbeats_and_succeeds_with_its_output(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    plan = {"work_s": 2.0, "beat_every_s": 0.5, "then": "succeed"}
    execution = run_to_end(admin_principal, target(receiver_port, plan), timeout_s=60, wait=30)
    assert execution.state == "succeeded", execution.reason
    kinds = [e.kind for e in events(execution)]
    assert kinds.index("awaiting_completion") < kinds.index("attempt_succeeded")
    handed = of_kind(execution, "awaiting_completion")[0]
    assert handed.data["status_code"] == 202 and handed.data["heartbeat_s"] == 5
    beats = of_kind(execution, "target_heartbeat")
    assert len(beats) == 1 and beats[0].data["count"] >= 2  # one entry, updated
    done = of_kind(execution, "attempt_succeeded")[0]
    assert done.actor == "target callback" and done.data["completed_by"] == "callback"
    assert done.data["output"] == {"execution_id": str(execution.id), "worked_s": 2.0}
    assert execution.output == {"execution_id": str(execution.id), "worked_s": 2.0}
    # The run's time is the target's, not the hand-off's.
    assert done.data["latency_ms"] >= 2000


def test_a_failure_is_retried_by_the_policy_and_a_permanent_one_is_not(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    plan = {"work_s": 0.2, "beat_every_s": 0.1, "then": "fail"}
    retried = run_to_end(
        admin_principal, target(receiver_port, plan), retry=TWO_TRIES, timeout_s=60, wait=30
    )
    assert retried.state == "dead" and retried.attempt == 2
    assert retried.reason_code == "target_failed"
    assert "the report's source was not ready" in retried.error
    assert [e.kind for e in events(retried)].count("awaiting_completion") == 2

    plan["then"] = "fail_permanently"
    permanent = run_to_end(
        admin_principal, target(receiver_port, plan), retry=TWO_TRIES, timeout_s=60, wait=30
    )
    assert permanent.state == "dead" and permanent.attempt == 1  # not retried
    assert "not retryable" in permanent.reason


def test_a_service_that_never_calls_back_lets_the_lease_lapse(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    plan = {"work_s": 0.1, "then": "vanish"}
    execution = run_to_end(
        admin_principal, target(receiver_port, plan), retry=ONE_SHOT, timeout_s=60, wait=30
    )
    assert execution.state == "dead"
    assert execution.reason_code == "completion_lapsed"
    assert "the target sent no heartbeat or completion" in execution.reason


def test_the_explainer_says_what_the_run_waits_for(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    plan = {"work_s": 30, "beat_every_s": 0.5, "then": "succeed"}
    schedule = make_schedule(
        admin_principal, target(receiver_port, plan), timeout_s=60, cron="* * * * *"
    )
    # The occurrence of the minute that began last: the explainer's question is an instant.
    minute = db_now().replace(second=0, microsecond=0)
    execution = execution_row(schedule, minute)
    publish(execution.id)
    Pump().until(lambda: of_kind(execution, "target_heartbeat"), timeout=20, what="a heartbeat")
    sentence = explain(schedule=schedule, at=execution.scheduled_for).sentence
    assert "is waiting for the target's completion since" in sentence, sentence
    assert "last heartbeat at" in sentence and "% done" in sentence
    assert "the next heartbeat or completion is due by" in sentence
    services.execution_cancel(actor=admin_principal, execution_id=execution.id)


# --- refusals ----------------------------------------------------------------------------------


def test_a_stale_attempts_callbacks_are_refused_and_recorded(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    plan = {"work_s": 60, "beat_every_s": 0.5, "then": "succeed"}
    schedule = make_schedule(admin_principal, target(receiver_port, plan), timeout_s=60)
    execution = make_execution(schedule)
    publish(execution.id)
    Pump().until(lambda: of_kind(execution, "awaiting_completion"), timeout=20, what="hand-off")
    execution.refresh_from_db()
    job = Completion(
        completion.base_url(str(execution.id)),
        completion.issue(
            execution_id=str(execution.id),
            attempt=execution.attempt,
            fencing_token=execution.fencing_token,
        ),
    )
    assert job.heartbeat(progress=1)["attempt"] == execution.attempt  # current: accepted

    services.execution_cancel(actor=admin_principal, execution_id=execution.id)
    for call in (job.heartbeat, lambda: job.succeed({"late": True}), lambda: job.fail("late")):
        with pytest.raises(Conflict) as refused:
            call()
        assert "is no longer current" in refused.value.message
    assert state_of(execution) == "cancelled"
    rejected = of_kind(execution, "completion_rejected")
    assert len(rejected) >= 3 and rejected[0].data["current_state"] == "cancelled"
    assert not of_kind(execution, "attempt_succeeded")


def test_a_missing_forged_or_foreign_capability_is_401_and_a_bad_body_400(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    schedule = make_schedule(admin_principal, target(receiver_port, {}), timeout_s=60)
    mine, other = make_execution(schedule), make_execution(schedule)
    token = completion.issue(execution_id=str(mine.id), attempt=1, fencing_token=0)
    url = f"{up.url}/v1/executions/{mine.id}"

    def post(action: str, body: Any, bearer: str | None = token) -> httpx.Response:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
        return httpx.post(url + action, json=body, headers=headers)

    assert post(":succeed", {}, bearer=None).status_code == 401
    forged = token[:-3] + ("aaa" if not token.endswith("aaa") else "bbb")
    assert post(":succeed", {}, bearer=forged).status_code == 401
    foreign = completion.issue(execution_id=str(other.id), attempt=1, fencing_token=0)
    answer = post(":succeed", {}, bearer=foreign)
    assert answer.status_code == 401
    assert "another execution" in answer.json()["error"]["message"]
    # A service token of the tenant is not a capability either.
    assert post(":heartbeat", {}, bearer="sk_live_not_a_capability").status_code == 401

    for body, field in (({"progress": 250}, "progress"), ({"colour": "red"}, "colour")):
        bad = post(":heartbeat", body)
        assert bad.status_code == 400 and set(bad.json()["error"]["detail"]) == {field}
    assert post(":fail", {}).status_code == 400  # `error` is required
    assert post(":fail", {"error": "a\x00b"}).status_code == 400
    huge = post(":succeed", {"output": "x" * (completion.MAX_OUTPUT_BYTES + 10)})
    assert huge.status_code == 400 and "output" in huge.json()["error"]["detail"]
    # The row was never running: each refused as stale, nothing changed.
    assert post(":succeed", {"output": 1}).status_code == 409
    assert state_of(mine) == "scheduled"


# --- queue targets, and the definition -------------------------------------------------------


def test_a_queue_message_carries_the_capability_and_its_consumer_completes_it(
    up: WebServer, admin_principal: Principal
) -> None:
    name = f"{admin_principal.tenant.slug}.reports"
    queue_target = {
        "type": "queue",
        "broker": "default",
        "exchange": "",
        "routing_key": name,
        "body": {"report": "daily"},
        "timeout_s": 60,
        "completion": "callback",
        "heartbeat_s": 30,
    }
    with Connection(django_settings.CELERY_BROKER_URL) as conn:
        conn.default_channel.client.delete(name)
        schedule = make_schedule(admin_principal, queue_target, timeout_s=60)
        execution = make_execution(schedule)
        publish(execution.id)
        Pump().until(lambda: of_kind(execution, "awaiting_completion"), timeout=20)
        assert state_of(execution) == "running"
        inbox = conn.SimpleQueue(name)
        message = inbox.get(timeout=5)
        message.ack()
        inbox.close()
    job = Completion.from_headers(message.headers)
    assert job.url == f"{completion.base_url(str(execution.id))}"
    job.heartbeat(progress=50, message="half")
    assert job.succeed({"rows": 3})["state"] == "succeeded"
    assert state_of(execution) == "succeeded"
    # The API and the client's model carry the result.
    viewer = Client(up.url, token=tenant_token(admin_principal))
    assert viewer.get_execution(str(execution.id)).output == {"rows": 3}


def test_the_definition_names_a_wrong_completion_field(admin_principal: Principal) -> None:
    base = {"type": "http", "url": "https://reports.example/run"}
    cases = {
        "target.completion": base | {"completion": "webhook"},
        "target.heartbeat_s": base | {"heartbeat_s": 30},  # without a callback
    }
    for field, bad in cases.items():
        with pytest.raises(InvalidSchedule) as refused:
            services.schedule_create(
                actor=admin_principal, data={"name": "r", "cron": "0 * * * *", "target": bad}
            )
        assert field in refused.value.detail, refused.value.detail
    too_fast = base | {"completion": "callback", "heartbeat_s": 1}
    with pytest.raises(InvalidSchedule, match="heartbeat_s"):
        services.schedule_create(
            actor=admin_principal, data={"name": "r", "cron": "0 * * * *", "target": too_fast}
        )
    made = services.schedule_create(
        actor=admin_principal,
        data={"name": "r", "cron": "0 * * * *", "target": base | {"completion": "callback"}},
    )
    assert made.target["completion"] == "callback" and made.target["heartbeat_s"] == 60


def test_the_client_sends_the_attempts_trace_context_with_each_callback() -> None:
    """The hand-off's traceparent rides on every callback (the web continues the trace)."""
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def answer(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "application/json"}, b'{"state": "running"}'

    with Ledger(answer) as platform:
        job = Completion.from_headers(
            {
                "X-Completion-URL": f"{platform.url}/v1/executions/e1",
                "X-Completion-Token": "cap",
                "traceparent": trace,
            }
        )
        job.heartbeat(progress=5)
        job.succeed({"ok": True})
    sent = [({k.lower(): v for k, v in r["headers"].items()}, r["path"]) for r in platform.requests]
    assert [path for _, path in sent] == [
        "/v1/executions/e1:heartbeat",
        "/v1/executions/e1:succeed",
    ]
    assert all(h["traceparent"] == trace and h["authorization"] == "Bearer cap" for h, _ in sent)


# --- stale attempts: swept, timed out, re-run --------------------------------------------------


def handed_off(principal: Principal, port: int, **row: Any) -> tuple[Execution, Completion]:
    """A running attempt held by its target (as a hand-off leaves it), and its capability;
    one attempt allowed, so a sweep ends it."""
    schedule = make_schedule(principal, target(port, {}), retry=ONE_SHOT, timeout_s=60)
    execution = make_execution(schedule)
    now = db_now()
    fields = {
        "state": "running",
        "fencing_token": 1,
        "started_at": now,
        "lease_owner": f"{completion.OWNER_PREFIX}w1",
        "lease_expires_at": now + timedelta(seconds=30),
    } | row
    Execution.objects.filter(id=execution.id).update(**fields)
    execution.refresh_from_db()
    token = completion.issue(
        execution_id=str(execution.id), attempt=1, fencing_token=execution.fencing_token
    )
    return execution, Completion(completion.base_url(str(execution.id)), token)


def refused(job: Completion) -> int:
    """How many of the three callbacks were refused with 409."""
    n = 0
    for call in (job.heartbeat, lambda: job.succeed({"late": True}), lambda: job.fail("late")):
        with pytest.raises(Conflict):
            call()
        n += 1
    return n


def test_a_swept_attempt_after_a_missed_heartbeat_takes_no_completion(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    execution, job = handed_off(
        admin_principal, receiver_port, lease_expires_at=db_now() - timedelta(seconds=1)
    )
    assert sweeper.sweep_expired_leases(partitions=None) == 1
    execution.refresh_from_db()
    assert execution.state == "dead" and execution.reason_code == "completion_lapsed"
    assert refused(job) == 3
    execution.refresh_from_db()
    assert execution.state == "dead" and not of_kind(execution, "attempt_succeeded")
    assert len(of_kind(execution, "completion_rejected")) == 3


def test_a_timed_out_attempt_takes_no_completion(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    started = db_now() - timedelta(seconds=61)
    execution, job = handed_off(
        admin_principal,
        receiver_port,
        started_at=started,
        lease_expires_at=started + timedelta(seconds=60),  # the deadline: no lease runs past it
    )
    assert sweeper.sweep_expired_leases(partitions=None) == 1
    execution.refresh_from_db()
    assert execution.reason_code == "completion_timeout"
    assert "did not complete within 60 s" in execution.reason
    assert refused(job) == 3


def test_a_re_run_leaves_the_earlier_attempts_capability_stale(
    up: WebServer, admin_principal: Principal, receiver_port: int
) -> None:
    execution, job = handed_off(admin_principal, receiver_port)
    assert job.succeed({"first": True})["state"] == "succeeded"
    services.execution_rerun(actor=admin_principal, execution_id=execution.id)
    assert refused(job) == 3
    execution.refresh_from_db()
    assert execution.state == "scheduled" and execution.attempt == 2
    assert execution.output is None  # a re-run starts without the earlier result
    assert [e.data.get("output") for e in of_kind(execution, "attempt_succeeded")] == [
        {"first": True}
    ]


# --- a worker restarted mid-run; a consumer that fails twice --------------------------------


def test_a_worker_restarted_mid_run_leaves_one_attempt_and_one_call(
    up: WebServer,
    admin_principal: Principal,
    receiver_port: int,
    receiver: Proc,
    start_worker: Any,
    platform_url: str,
) -> None:
    env = {"TARGET_TEST_ALLOW": f"127.0.0.1:{receiver_port}", "PLATFORM_URL": platform_url}
    plan = {"work_s": 4, "beat_every_s": 0.3, "then": "succeed"}
    path = f"/report-{time.monotonic_ns()}"
    schedule = make_schedule(
        admin_principal, target(receiver_port, plan, heartbeat_s=5, path=path), timeout_s=60
    )
    execution = make_execution(schedule)
    first = start_worker("w-restart-1", queues="restart.short", **env)
    publish(execution.id, queue="restart.short")
    Pump(queue="restart.short").until(lambda: of_kind(execution, "awaiting_completion"))
    first.kill()  # mid-run: the target holds the attempt, no worker does
    start_worker("w-restart-2", queues="restart.short", **env)
    Pump(queue="restart.short").until(lambda: state_of(execution) == "succeeded", timeout=30)
    execution.refresh_from_db()
    assert execution.attempt == 1 and execution.fencing_token == 1
    assert [e.kind for e in events(execution)].count("claimed") == 1
    calls = [line for line in receiver.output().splitlines() if f"POST {path} " in line]
    assert len(calls) == 1, calls
    assert of_kind(execution, "attempt_succeeded")[0].data["output"]["worked_s"] == 4.0


def _consume(name: str, execution: Execution, plan: list[str]) -> None:
    """The tenant's queue consumer: one message per attempt, each ended as `plan` says
    ("fail" or "succeed") through the capability its headers carry."""
    pump = Pump()
    with Connection(django_settings.CELERY_BROKER_URL) as conn:
        publish(execution.id)
        inbox = conn.SimpleQueue(name)
        for n, end in enumerate(plan, start=1):
            deadline = time.monotonic() + 20
            message = None
            while message is None and time.monotonic() < deadline:
                pump()
                try:
                    message = inbox.get(timeout=0.2)
                except inbox.Empty:
                    continue
            assert message is not None, f"attempt {n} never reached the consumer"
            message.ack()
            job = Completion.from_headers(message.headers)
            if end == "fail":
                state = job.fail(f"consumer failure {n}")["state"]
                assert state == ("dead" if n == len(plan) else "retry_scheduled")
            else:
                assert job.succeed({"attempt": n})["state"] == "succeeded"
        inbox.close()


def test_a_queue_consumer_that_fails_twice_then_succeeds(
    up: WebServer, admin_principal: Principal
) -> None:
    """The retry policy, alerts and health hold for a queue-executed job: an occurrence
    whose consumer fails three times is dead (one failure alert, by the tenant's
    default policy), the next fails twice then succeeds (retries spaced by the policy,
    one recovery alert), and the schedule's health counts both."""
    tenant = admin_principal.tenant
    AlertChannel.objects.create(
        tenant=tenant, name="ops", kind="email", config={"to": ["o@x.test"]}
    )
    name = f"{tenant.slug}.flaky"
    queue_target = {
        "type": "queue",
        "broker": "default",
        "exchange": "",
        "routing_key": name,
        "body": {},
        "timeout_s": 60,
        "completion": "callback",
        "heartbeat_s": 30,
    }
    three = {"max_attempts": 3, "backoff": "fixed", "initial_s": 1, "max_s": 1}
    schedule = make_schedule(admin_principal, queue_target, retry=three, timeout_s=60)
    with Connection(django_settings.CELERY_BROKER_URL) as conn:
        conn.default_channel.client.delete(name)
    earlier = make_execution(schedule, due_in_s=-60)
    _consume(name, earlier, ["fail", "fail", "fail"])
    execution = make_execution(schedule)
    _consume(name, execution, ["fail", "fail", "succeed"])

    earlier.refresh_from_db()
    assert earlier.state == "dead" and earlier.attempt == 3
    execution.refresh_from_db()
    assert execution.state == "succeeded" and execution.attempt == 3
    # Spaced by the policy: 1 s, jittered downwards by at most retry.JITTER_FRACTION.
    retries = of_kind(execution, "retry_scheduled")
    floor = 1.0 * (1 - retry.JITTER_FRACTION)
    assert len(retries) == 2 and all(floor <= r.data["delay_s"] <= 1.0 for r in retries)
    claims = [e.at for e in of_kind(execution, "claimed")]
    assert len(claims) == 3
    assert all((b - a).total_seconds() >= floor for a, b in pairwise(claims))
    # One alert per occurrence, as the default policy says: the dead one's failure,
    # then the recovery; none for the attempts on the way.
    sent = list(
        Alert.objects.filter(schedule=schedule)
        .order_by("scheduled_for")
        .values_list("kind", "execution_id")
    )
    assert sent == [(AlertKind.FAILURE, earlier.id), (AlertKind.RECOVERY, execution.id)]
    # Health counts both occurrences, each once, with the durations the callbacks gave.
    health = selectors.schedule_health(tenant=tenant, schedule=schedule, now=db_now())
    day = health.windows["24h"]
    assert (day.runs, day.succeeded, day.success_rate) == (2, 1, 0.5)
    assert health.last_state == "succeeded" and health.consecutive_failures == 0
    assert day.p50_s is not None and day.p50_s > 0


def tenant_token(principal: Principal) -> str:
    _, raw = tenant_services.token_issue(tenant=principal.tenant, name="viewer", role=Role.VIEWER)
    return str(raw)
