"""The Python client and schedctl through the database outages of a PostgreSQL
fail-over, against a gunicorn whose every database connection goes through a fault
module_db_proxy: a request cut off while its COMMIT was on the server (a 503 that did not
mean "nothing done"), a simulated planned switchover under load, and schedctl
riding out an outage or giving up with a clear error."""

from __future__ import annotations

import io
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from dispatch.models import Schedule
from tests.support.client_support import (
    TARGET,
    Load,
    Recorder,
    Tenant,
    definition,
    drive,
    live_server,
    make_tenant,
)
from tests.support.database_faults import read_only
from tests.support.faultproxy import FaultProxy
from tests.support.procs import WebServer, wait_for

from scheduler_client import Client, Unavailable  # isort: skip
from scheduler_client.cli import main  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

UNREACHABLE = "the database cannot be reached; retry after 2 s"


@pytest.fixture(scope="module")
def server(
    module_db_proxy: FaultProxy, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    with (
        django_db_blocker.unblock(),
        live_server(
            tmp_path_factory.mktemp("web"),
            DATABASE_URL=module_db_proxy.database_url(connection.settings_dict),
        ) as web,
    ):
        yield web


@pytest.fixture
def owner(
    db: Any, module_db_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tenant]:
    for name in ("SCHEDCTL_RETRIES", "SCHEDCTL_RETRY_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    module_db_proxy.pass_()
    yield make_tenant("billing")
    module_db_proxy.pass_()


def heal_on_503(module_db_proxy: FaultProxy) -> Recorder:
    """A recording transport that heals the proxy once the client has seen a 503."""
    return Recorder(on_response=lambda r: module_db_proxy.pass_() if r.status_code == 503 else None)


def cut_while_committing(
    module_db_proxy: FaultProxy, call: Callable[[], Any], made: Callable[[], bool]
) -> Any:
    """Run `call` (in a thread) and cut the web's database link right after its COMMIT
    reached the server, once `made()` sees the row committed: the server did the work,
    the web never learns it and answers 503. `call`'s result, or the error it raised."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as exc:
            outcome["result"] = exc

    module_db_proxy.arm(b"COMMIT", then="blackhole")  # the COMMIT goes through; its answer is held
    thread = threading.Thread(target=run)
    thread.start()
    assert module_db_proxy.armed.wait(30), "no COMMIT went to the database"
    wait_for(made, timeout=10, what="the row to be committed")
    module_db_proxy.refuse()
    thread.join(60)
    assert not thread.is_alive()
    return outcome["result"]


def test_a_keyed_job_cut_off_while_committing_is_sent_again_and_made_once(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    key = "close-2026-11-30"
    recorder = heal_on_503(module_db_proxy)
    with Client(server.url, owner.token, transport=recorder) as client:
        job = cut_while_committing(
            module_db_proxy,
            lambda: client.create_job({"idempotency_key": key, "target": TARGET}),
            lambda: Schedule.objects.filter(idempotency_key=key).exists(),
        )
    # The retry found the job the first attempt made: 200, not a second 201.
    assert recorder.statuses() == [503, 200]
    assert [str(s.id) for s in Schedule.objects.filter(idempotency_key=key)] == [job.id]


def test_a_post_without_a_key_cut_off_while_committing_is_not_sent_again(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    recorder = heal_on_503(module_db_proxy)
    with Client(server.url, owner.token, transport=recorder) as client:
        error = cut_while_committing(
            module_db_proxy,
            lambda: client.create_schedule(definition("nightly")),
            lambda: Schedule.objects.filter(name="nightly").exists(),
        )
    assert isinstance(error, Unavailable) and recorder.statuses() == [503]
    assert str(error) == (
        f"{UNREACHABLE} — not sent again: POST /v1/schedules is not idempotent and may have "
        "taken effect; look before you send it again"
    )
    # It had: sending it again would have made a second schedule.
    assert Schedule.objects.filter(name="nightly").count() == 1


def test_a_planned_switchover_loses_no_client_request(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    """The primary's side of a switchover, as the web sees it: its sessions end and new
    ones are read-only (demoted), then it takes no connections (stopping, no primary
    yet), then one takes writes again (the promoted standby, reached anew)."""
    loads = [Load() for _ in range(4)]
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=drive, args=(server.url, owner.token, f"switchover-{n}", load, stop)
        )
        for n, load in enumerate(loads)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # steady traffic first
    with read_only(module_db_proxy):
        time.sleep(1.0)
        module_db_proxy.refuse()
        time.sleep(1.5)
    module_db_proxy.pass_()
    time.sleep(1.5)  # traffic on the "new primary"
    stop.set()
    for thread in threads:
        thread.join(120)

    statuses = Counter(s for load in loads for s in load.recorder.statuses())
    print(  # the figures of the run (pytest -s)
        f"switchover: {sum(statuses.values())} HTTP requests {dict(statuses)}, "
        f"{sum(len(load.keys) for load in loads)} jobs made, slowest call "
        f"{max(load.slowest_s for load in loads):.1f} s"
    )
    assert [f for load in loads for f in load.failures] == []  # 0 failed after retries
    assert statuses[503] > 0, statuses  # the outage was real: requests met it
    # No 500, no other error, and every request answered: none reset on a pooled
    # connection the server closed while the client waited out a Retry-After.
    errors = [e.error for load in loads for e in load.recorder.exchanges if e.error]
    assert set(statuses) <= {200, 201, 503}, (statuses, errors)
    made = [key for load in loads for key in load.keys]
    rows = Counter(
        Schedule.objects.filter(idempotency_key__in=made).values_list("idempotency_key", flat=True)
    )
    assert len(made) > 0 and rows == Counter(made)  # each job once: none lost, none twice


# ---------------------------------------------------------------------- schedctl


def schedctl(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_schedctl_waits_out_an_outage_and_says_so(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    module_db_proxy.refuse()  # resets the web's connections: counted from here on
    refused = module_db_proxy.resets
    # Healed once the web's new connection was refused: its 503 is on the way by then.
    healer = threading.Thread(
        target=lambda: (
            wait_for(lambda: module_db_proxy.resets > refused, timeout=30),
            module_db_proxy.pass_(),
        )
    )
    healer.start()
    code, out, err = schedctl("--url", server.url, "--token", owner.token, "ls")
    healer.join(30)
    assert code == 0, err
    assert out.split() == ["ID", "NAME", "WHEN", "TIMEZONE", "PAUSED", "NEXT", "RUN", "VERSION"]
    assert err.splitlines()[0] == (
        f"GET /v1/schedules: HTTP 503 ({UNREACHABLE}); retrying in 2.0 s (attempt 2 of 7)"
    )


def test_schedctl_gives_up_with_a_clear_error_when_the_outage_outlasts_its_retries(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    module_db_proxy.refuse()
    code, _, err = schedctl("--url", server.url, "--token", owner.token, "--retries", "1", "ls")
    assert code == 1
    *retried, last = err.splitlines()
    assert retried == [
        f"GET /v1/schedules: HTTP 503 ({UNREACHABLE}); retrying in 2.0 s (attempt 2 of 2)"
    ]
    assert last.startswith(f"error: {UNREACHABLE} — gave up after 2 attempts in 2.")
    # A budget the first wait does not fit in: no retry at all.
    code, _, err = schedctl(
        "ls", "--url", server.url, "--token", owner.token, "--retry-timeout", "1"
    )
    assert code == 1 and err.startswith(f"error: {UNREACHABLE} — gave up after 1 attempt in 0.")


def test_schedctl_names_a_retry_limit_that_is_not_a_number(
    server: WebServer, owner: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDCTL_RETRIES", "many")
    assert schedctl("ls", "--url", server.url, "--token", owner.token) == (
        2,
        "",
        "error: SCHEDCTL_RETRIES: not a whole number: 'many'\n",
    )
    monkeypatch.delenv("SCHEDCTL_RETRIES")
    monkeypatch.setenv("SCHEDCTL_RETRY_TIMEOUT", "soon")
    assert schedctl("ls", "--url", server.url, "--token", owner.token)[2] == (
        "error: SCHEDCTL_RETRY_TIMEOUT: not a number: 'soon'\n"
    )
    assert schedctl("ls", "--url", server.url, "--token", owner.token, "--retries", "-1")[:2] == (
        2,
        "",
    )
