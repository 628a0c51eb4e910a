"""The execution page's live log follower (Django test client, real PostgreSQL and
Redis): each step appends the lines after the page's cursor and a follower that asks
again — with the page's state region (state, timeline, controls) when the state moved
on from the one the page shows; an ended attempt's step stops following and reads the
log kept with the execution; a new attempt (or a cursor the page could not have)
restarts the region; another tenant's execution is a 404."""

from __future__ import annotations

import re

import pytest

from dispatch import logs
from dispatch.models import Execution, ExecutionState
from dispatch.services.logs import keep_attempt_log
from tests.support.console_support import World

pytestmark = pytest.mark.django_db


def _running(execution: Execution, attempt: int = 1) -> None:
    Execution.objects.filter(pk=execution.pk).update(
        state=ExecutionState.RUNNING, attempt=attempt, fencing_token=1
    )


def _step(world: World, execution: Execution, **params: str) -> tuple[int, str, dict[str, str]]:
    response = world.client("viewer").get(
        f"/executions/{execution.id}/log", params, headers={"HX-Request": "true"}
    )
    return response.status_code, response.content.decode(), dict(response.headers)


def _follower_cursor(html: str) -> str | None:
    found = re.search(r'id="live-log-follow"[^>]*after=([0-9-]*)"', html)
    return found.group(1) if found else None


def _follower_state(html: str) -> str | None:
    found = re.search(r'id="live-log-follow"[^>]*state=([a-z_]+)&', html)
    return found.group(1) if found else None


STATE_REGION = '<section id="execution-live" hx-swap-oob="true"'


def test_a_step_appends_the_new_lines_with_the_state_and_asks_again(world: World) -> None:
    execution = world.execution
    _running(execution)
    eid = str(execution.id)
    assert logs.append(eid, 1, "output", ["first <b>line</b>", "second"], fencing_token=1) == 2

    page = world.client("viewer").get(f"/executions/{eid}/").content.decode()
    assert 'id="live-log-follow"' in page and 'hx-trigger="every 500ms"' in page
    opened_at = _follower_cursor(page)
    assert opened_at, "the page follows from its last line"

    assert _follower_state(page) == "running"

    logs.append(eid, 1, "output", ["third"], fencing_token=1)
    status, html, _ = _step(world, execution, attempt="1", state="running", after=opened_at)
    assert status == 200
    assert 'hx-swap-oob="beforeend:#execution-live-log"' in html
    assert ">third</span>" in html and "second" not in html  # only what is new
    assert STATE_REGION not in html, "the state the page shows is current: not redrawn"
    cursor = _follower_cursor(html)
    assert cursor and logs.cursor_key(cursor) > logs.cursor_key(opened_at)
    # Nothing new: no lines, the same cursor, still following.
    status, html, _ = _step(world, execution, attempt="1", state="running", after=cursor)
    assert "beforeend" not in html and _follower_cursor(html) == cursor
    # Text is escaped, never markup.
    status, html, _ = _step(world, execution, attempt="1", state="running")
    assert "first &lt;b&gt;line&lt;/b&gt;" in html and "<b>" not in html
    # A page that still shows "queued" gets the state region with the lines.
    status, html, _ = _step(world, execution, attempt="1", state="queued", after=cursor)
    assert STATE_REGION in html and "badge" in html and _follower_state(html) == "running"


def test_an_ended_attempts_step_reads_the_kept_log_and_stops(world: World) -> None:
    execution = world.execution
    _running(execution)
    eid = str(execution.id)
    logs.append(eid, 1, "output", ["one", "two"], fencing_token=1)
    first = logs.read(eid, 1, after=None, limit=10)[0].cursor
    Execution.objects.filter(pk=execution.pk).update(state=ExecutionState.SUCCEEDED)
    assert keep_attempt_log(eid, 1, actor="test") is True
    status, html, _ = _step(world, execution, attempt="1", state="running", after=first)
    assert status == 200 and ">two</span>" in html and ">one</span>" not in html
    assert 'id="live-log-follow"' not in html, "an ended attempt is not followed"
    assert '<span id="live-log-status" hx-swap-oob="true">ended</span>' in html
    # The page said running: its state region comes along, saying succeeded, with the
    # timeline and the controls of a final execution.
    assert STATE_REGION in html and "succeeded" in html
    page = world.client("viewer").get(f"/executions/{eid}/").content.decode()
    assert ">two</span>" in page and 'id="live-log-follow"' not in page


def test_a_new_attempt_or_a_foreign_cursor_restarts_the_region(world: World) -> None:
    execution = world.execution
    _running(execution, attempt=2)
    logs.append(str(execution.id), 2, "output", ["retry says hi"], fencing_token=1)
    for params in (
        {"attempt": "1", "state": "running"},
        {"attempt": "2", "state": "running", "after": "../../etc"},
        {"attempt": "x"},
    ):
        status, html, headers = _step(world, execution, **params)
        assert status == 200, params
        assert headers["HX-Retarget"] == "#live-log" and headers["HX-Reswap"] == "outerHTML"
        assert '<section id="live-log"' in html and "attempt 2" in html
        assert ">retry says hi</span>" in html
        assert (STATE_REGION in html) == ("state" not in params), params


def test_another_tenants_execution_log_is_a_404(world: World) -> None:
    theirs = world.other_execution
    _running(theirs)
    logs.append(str(theirs.id), 1, "output", ["their line"], fencing_token=1)
    status, html, _ = _step(world, theirs, attempt="1")
    assert status == 404 and "their line" not in html
