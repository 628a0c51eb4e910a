"""The runs page: every filter selects exactly its rows, keyset pages neither skip
nor repeat, the capped total, links to the execution and to "why?", another
tenant's runs never shown, a bad filter value is an inline error (400, naming
the field) and never a 500, and a GET needs no CSRF token. The pages linking
into it (dashboard, schedule page, operators) carry the filter."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.db import connection

from dispatch import services
from dispatch.history import partitions
from dispatch.models import Execution, Schedule
from dispatch.selectors import ERROR_SCAN_ROWS
from tests.support.console_support import TARGET, World, text
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db

ROW_ID = re.compile(r'data-execution-id="([0-9a-f-]{36})"')
BASE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def shown(response: Any) -> list[str]:
    """The execution ids of the table's rows, in page order."""
    assert response.status_code == 200, text(response)[:2000]
    return ROW_ID.findall(text(response))


def run(schedule: Schedule, hours_ago: float, **fields: Any) -> Execution:
    at = BASE - timedelta(hours=hours_ago)
    return Execution.objects.create(
        schedule=schedule,
        tenant=schedule.tenant,
        partition=schedule.partition,
        scheduled_for=at,
        due_at=at,
        **fields,
    )


@pytest.fixture
def mix(world: World) -> dict[str, Any]:
    """A few runs of two schedules of the tenant, one of each kind a filter picks."""
    hourly = services.schedule_create(
        actor=world.admin_p, data={"name": "hourly-sync", "cron": "0 * * * *", "target": TARGET}
    )
    nightly = world.schedule
    rows = {
        "dead": run(nightly, 1, state="dead", error="HTTP 503 from billing.internal"),
        "failed": run(hourly, 2, state="failed", error="connection refused (ECONNREFUSED)"),
        "ok": run(nightly, 3, state="succeeded", status_code=200),
        "skipped": run(hourly, 4, state="skipped", reason="the schedule was paused"),
        "manual": run(hourly, 30, state="succeeded", trigger="manual"),
        "rerun": run(nightly, 50, state="succeeded", reruns=1, attempt=2, attempt_base=1),
        "old_dead": run(hourly, 24 * 40, state="dead", error="Timed out after 30 s"),
    }
    # The world's own run (a manual trigger, now) is in the tenant too.
    rows["world"] = world.execution
    return {"rows": rows, "hourly": hourly, "nightly": nightly}


def ids(mix: dict[str, Any], *names: str) -> set[str]:
    return {str(mix["rows"][n].id) for n in names}


@pytest.mark.parametrize(
    "query,expected",
    [
        ("", ["dead", "failed", "ok", "skipped", "manual", "rerun", "old_dead", "world"]),
        ("state=dead", ["dead", "old_dead"]),
        ("state=dead,failed", ["dead", "failed", "old_dead"]),
        ("state=dead&state=skipped", ["dead", "skipped", "old_dead"]),
        ("state=failed,timed_out,dead", ["dead", "failed", "old_dead"]),
        ("schedule=hourly-sync", ["failed", "skipped", "manual", "old_dead"]),
        ("schedule=HOURLY-SYNC&state=dead", ["old_dead"]),
        ("trigger=manual", ["manual", "world"]),
        ("trigger=cron&schedule=nightly", ["dead", "ok", "rerun"]),
        ("from=2026-06-01T09:30&to=2026-06-01T11:30", ["dead", "failed"]),
        ("from=2026-05-01T00:00:00Z&state=dead", ["dead"]),
        ("to=2026-05-01T00:00:00Z", ["old_dead"]),
        ("error=ECONNREFUSED", ["failed"]),
        ("error=timed+out", ["old_dead"]),
        ("error=http+503&state=failed", []),
        ("rerun=1", ["rerun"]),
    ],
)
def test_each_filter_selects_exactly_its_runs(
    world: World, mix: dict[str, Any], query: str, expected: list[str]
) -> None:
    # Times without an offset are read in the viewer's zone (UTC here: no preference set).
    response = world.client("viewer").get(f"/runs/?{query}")
    got = shown(response)
    assert set(got) == ids(mix, *expected), query
    assert len(got) == len(set(got))


def test_schedule_filter_by_id_shows_its_name_and_rows_newest_first(
    world: World, mix: dict[str, Any]
) -> None:
    response = world.client("viewer").get(f"/runs/?schedule={mix['hourly'].id}")
    assert shown(response) == [
        str(mix["rows"][n].id) for n in ("failed", "skipped", "manual", "old_dead")
    ]
    assert 'value="hourly-sync"' in text(response)
    assert "Matching runs: <strong>4</strong>" in text(response)


def test_rows_link_to_the_execution_and_to_why(world: World, mix: dict[str, Any]) -> None:
    # An occurrence of the nightly schedule (00:00 in Amsterdam), so the explainer has it.
    dead = Execution.objects.create(
        schedule=world.schedule,
        tenant=world.tenant,
        scheduled_for=datetime(2026, 5, 31, 22, 0, tzinfo=UTC),
        due_at=datetime(2026, 5, 31, 22, 0, tzinfo=UTC),
        state="dead",
        error="HTTP 500",
    )
    page = text(world.client("viewer").get("/runs/?state=dead"))
    assert f'href="/executions/{dead.id}/"' in page
    why = re.search(
        rf'<tr data-execution-id="{dead.id}">.*?<a href="(/explain\?[^"]+)">why\?</a>', page, re.S
    )
    assert why is not None
    query = parse_qs(urlparse(html.unescape(why.group(1))).query)
    assert query["schedule"] == [str(dead.schedule_id)]
    assert datetime.fromisoformat(query["at_utc"][0]) == dead.scheduled_for
    # The link answers: the explainer finds this very execution.
    answer = world.client("viewer").get(html.unescape(why.group(1)))
    assert answer.status_code == 200 and str(dead.id) in text(answer)


def test_wrapper_and_row_ids_for_the_bulk_bar(world: World, mix: dict[str, Any]) -> None:
    page = text(world.client("viewer").get("/runs/"))
    assert page.count('<div id="runs-table">') == 1
    table = page[page.index('<div id="runs-table">') :]
    assert set(ROW_ID.findall(table)) == ids(mix, *mix["rows"])


def test_keyset_pages_cover_every_run_once(world: World) -> None:
    base = BASE - timedelta(days=3)
    Execution.objects.bulk_create(
        Execution(
            schedule=world.schedule,
            tenant=world.tenant,
            partition=world.schedule.partition,
            scheduled_for=base - timedelta(minutes=i),
            due_at=base - timedelta(minutes=i),
            state="succeeded",
        )
        for i in range(119)
    )
    client = world.client("viewer")
    url: str | None = "/runs/?schedule=nightly"
    seen: list[str] = []
    pages = 0
    while url:
        response = client.get(url)
        page = shown(response)
        assert len(page) == (50 if pages < 2 else 20)
        seen.extend(page)
        assert "Matching runs: <strong>120</strong>" in text(response)
        nxt = re.search(r'<a href="([^"]+)" id="runs-next"', text(response))
        url = html.unescape(nxt.group(1)) if nxt else None
        if url:
            assert "schedule=nightly" in url  # the filter rides along with the cursor
        pages += 1
    assert pages == 3
    expected = Execution.objects.filter(schedule=world.schedule).order_by("-scheduled_for", "-id")
    assert seen == [str(pk) for pk in expected.values_list("id", flat=True)]


def test_total_is_capped_at_ten_thousand(world: World) -> None:
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO dispatch_execution (id, schedule_id, tenant_id, scheduled_for, due_at,
                                            trigger, attempt, state, fencing_token)
            SELECT gen_random_uuid(), %(s)s, %(t)s, %(at)s - g * interval '1 second',
                   %(at)s - g * interval '1 second', 'cron', 1, 'succeeded', 0
            FROM generate_series(1, 10001) AS g
            """,
            {"s": world.schedule.id, "t": world.tenant.id, "at": BASE},
        )
    client = world.client("viewer")
    assert "Matching runs: <strong>10,000+</strong>" in text(client.get("/runs/"))
    assert "Matching runs: <strong>1</strong>" in text(client.get("/runs/?trigger=manual"))


def test_another_tenants_runs_are_never_shown(world: World, mix: dict[str, Any]) -> None:
    theirs = str(world.other_execution.id)
    client = world.client("viewer")
    for query in ("", "trigger=manual", "state=queued,scheduled,running"):
        assert theirs not in text(client.get(f"/runs/?{query}"))
    # Their schedule, by id or by name, is not one of ours: an inline error, no rows.
    for ref in (str(world.other_schedule.id), "theirs"):
        response = client.get(f"/runs/?schedule={ref}")
        assert response.status_code == 400
        assert "schedule: no schedule" in text(response) and theirs not in text(response)
    # And they see only their own.
    outsider = text(world.client("outsider").get("/runs/"))
    assert set(ROW_ID.findall(outsider)) == {theirs}


@pytest.mark.parametrize(
    "query,field",
    [
        ("state=bogus", "state"),
        ("state=dead,", "state"),
        ("trigger=nope", "trigger"),
        ("from=yesterday", "from"),
        ("to=2026-13-01T00:00", "to"),
        ("from=2026-06-02T00:00&to=2026-06-01T00:00", "to"),
        ("error=" + "x" * 201, "error"),
        ("cursor=not-a-cursor", "cursor"),
        ("schedule=no-such-schedule", "schedule"),
        ("from=99999-01-01T00:00", "from"),
    ],
)
def test_a_bad_filter_value_is_an_inline_error(
    world: World, mix: dict[str, Any], query: str, field: str
) -> None:
    response = world.client("viewer").get(f"/runs/?{query}")
    assert response.status_code == 400
    page = text(response)
    error = re.search(r'<p class="error" role="alert" id="runs-error">(.*?)</p>', page, re.S)
    assert error is not None and error.group(1).startswith(f"{field}: "), page[:3000]
    assert ROW_ID.findall(page) == []
    # The form is still there to fix it.
    assert 'id="runs-filters"' in page


def test_get_needs_no_csrf_token_and_htmx_gets_the_table_alone(
    world: World, mix: dict[str, Any]
) -> None:
    client = world.client("viewer", csrf=True)
    assert set(shown(client.get("/runs/?state=dead"))) == ids(mix, "dead", "old_dead")
    partial = client.get("/runs/?state=dead", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="runs-table")
    body = text(partial)
    assert partial.status_code == 200 and body.lstrip().startswith('<div id="runs-table">')
    assert "<html" not in body and set(ROW_ID.findall(body)) == ids(mix, "dead", "old_dead")
    bad = client.get("/runs/?state=bogus", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="runs-table")
    # 200 for htmx (it swaps only 2xx answers): the error replaces the table.
    assert bad.status_code == 200 and 'id="runs-error">state: unknown state' in text(bad)
    assert ROW_ID.findall(text(bad)) == []


def test_the_page_costs_the_same_queries_for_more_rows(
    world: World, mix: dict[str, Any], django_assert_max_num_queries: Any
) -> None:
    client = world.client("viewer")
    client.get("/runs/")
    with django_assert_max_num_queries(20) as small:
        assert client.get("/runs/").status_code == 200
    for i in range(30):
        s = services.schedule_create(
            actor=world.admin_p, data={"name": f"more-{i}", "cron": "0 0 * * *", "target": TARGET}
        )
        run(s, 5 + i, state="dead", error="boom")
    with django_assert_max_num_queries(len(small.captured_queries)):
        assert len(shown(client.get("/runs/"))) == 38


def test_navigation_and_pages_link_into_it_prefiltered(world: World, mix: dict[str, Any]) -> None:
    client = world.client("viewer")
    dash = text(client.get("/"))
    assert 'href="/runs/"' in dash  # the navigation
    assert 'id="runs-dead" href="/runs/?state=dead"' in dash
    failures = re.search(r'id="runs-failures" href="([^"]+)"', dash)
    assert failures is not None
    # The dashboard's failures link: the failure states since a day ago (its list's own span).
    query = parse_qs(urlparse(html.unescape(failures.group(1))).query)
    assert query["state"] == ["failed,timed_out,dead"]
    since = datetime.fromisoformat(query["from"][0])
    assert timedelta(hours=23) < datetime.now(UTC) - since < timedelta(hours=25)
    assert shown(client.get(html.unescape(failures.group(1)))) == []  # mix is months old
    assert 'id="runs-running" href="/runs/?state=running"' in dash
    schedule_page = text(client.get(f"/schedules/{world.schedule.id}/"))
    link = re.search(r'id="schedule-runs" href="([^"]+)"', schedule_page)
    assert link is not None
    assert set(shown(client.get(html.unescape(link.group(1))))) == ids(
        mix, "dead", "ok", "rerun", "world"
    )


def test_operators_link_into_a_tenants_runs_through_the_switch(
    world: World, mix: dict[str, Any]
) -> None:
    staff = world.client("staff")
    staff.get("/runs/")  # staff's session starts on some tenant; make it the outsider's
    staff.post("/tenant", {"tenant": "outsider"})
    ops = text(staff.get("/ops/"))
    dead = mix["rows"]["dead"]
    link = re.search(
        rf'href="(/runs/\?tenant=billing&amp;schedule={dead.schedule_id}&amp;state=dead)"', ops
    )
    assert link is not None, ops[:4000]
    offer = staff.get(html.unescape(link.group(1)))
    assert offer.status_code == 200 and ROW_ID.findall(text(offer)) == []
    assert 'name="next" value="/runs/?state=dead&amp;schedule=' in text(offer)
    nxt = re.search(r'name="next" value="([^"]+)"', text(offer))
    assert nxt is not None
    switched = staff.post("/tenant", {"tenant": "billing", "next": html.unescape(nxt.group(1))})
    assert switched.status_code == 302 and switched["Location"].startswith("/runs/?")
    assert set(shown(staff.get(switched["Location"]))) == ids(mix, "dead")
    # A member of one tenant cannot use the link to reach another.
    assert world.client("viewer").get("/runs/?tenant=outsider").status_code == 404


def test_error_search_past_its_window_offers_to_search_on(world: World) -> None:
    """More than ERROR_SCAN_ROWS newer failures above the only match: the first page
    says so and links on; the link finds it. No total is claimed for the search."""
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO dispatch_execution (id, schedule_id, tenant_id, scheduled_for, due_at,
                                            trigger, attempt, state, fencing_token, error)
            SELECT gen_random_uuid(), %(s)s, %(t)s, %(at)s - g * interval '1 second',
                   %(at)s - g * interval '1 second', 'cron', 1, 'dead', 0,
                   CASE WHEN g = %(n)s + 3 THEN 'disk quota exceeded' ELSE 'HTTP 500' END
            FROM generate_series(1, %(n)s + 5) AS g
            """,
            {"s": world.schedule.id, "t": world.tenant.id, "at": BASE, "n": ERROR_SCAN_ROWS},
        )
    client = world.client("viewer")
    first = client.get("/runs/?error=quota")
    assert shown(first) == [] and "search on below them" in text(first)
    assert "Matches are not counted for an error-text search" in text(first)
    nxt = re.search(
        r'<a href="([^"]+)" id="runs-next" rel="next">Search older failures', text(first)
    )
    assert nxt is not None
    found = shown(client.get(html.unescape(nxt.group(1))))
    match = Execution.objects.get(tenant=world.tenant, error="disk quota exceeded")
    assert found == [str(match.id)]


def test_a_sparse_filter_past_the_days_a_page_reads_offers_to_search_on(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter whose only match lies below the days a page reads (READ_DAYS): the page
    says so and links on; following the links finds it; the total says "at least"."""
    today = partitions.day_of(db_now())
    partitions.reopen_days(today - timedelta(days=6))
    monkeypatch.setattr(partitions, "HELD_DAYS_CACHE_S", 0.0)
    monkeypatch.setattr(partitions, "READ_DAYS", 2)
    at = partitions.day_start(today - timedelta(days=5)) + timedelta(hours=3)
    match = Execution.objects.create(
        schedule=world.schedule,
        tenant=world.tenant,
        partition=world.schedule.partition,
        scheduled_for=at,
        due_at=at,
        state="dead",
        error="HTTP 503",
    )
    client = world.client("viewer")
    page = client.get("/runs/?state=dead")
    assert shown(page) == []
    assert "No match in the 2 days of history a page reads: search on below them." in text(page)
    assert "Matching runs: <strong>0+</strong>" in text(page)
    found: list[str] = []
    for _ in range(10):
        nxt = re.search(
            r'<a href="([^"]+)" id="runs-next" rel="next">Search older history', text(page)
        )
        assert nxt is not None
        page = client.get(html.unescape(nxt.group(1)))
        found = shown(page)
        if found:
            break
    assert found == [str(match.id)]
