"""Several specs, intervals with an anchor and start_at/end_at through the API: create,
PATCH and GET carry `specs` and the bounds, `cron` keeps the single-spec meaning, the
400s name the field (`specs[1].every`, `specs[0].cron`, `end_at`) and save nothing,
preview and the explainer agree with the stored next_run_at."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule
from dispatch.timing import cron
from tests.support.instants import zulu

pytestmark = pytest.mark.django_db


def create(api: APIClient, body: dict[str, Any], code: int = 201) -> dict[str, Any]:
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == code, res.content
    return res.json() if code < 400 else res.json()["error"]


def patch(api: APIClient, sid: str, body: dict[str, Any], code: int = 200) -> dict[str, Any]:
    res = api.patch(f"/v1/schedules/{sid}", body, format="json")
    assert res.status_code == code, res.content
    return res.json() if code < 400 else res.json()["error"]


def test_specs_round_trip_and_union_preview(api: APIClient, seed_example: dict[str, Any]) -> None:
    seed_example.pop("cron")
    specs = [{"cron": "0 6 * * 1-5"}, {"every": "90m", "anchor": "2026-01-01T00:15:00"}]
    body = create(api, seed_example | {"specs": specs, "timezone": "Europe/Amsterdam"})
    assert body["specs"] == [specs[0], {"every": "1h30m", "anchor": "2026-01-01T00:15:00"}]
    assert body["start_at"] is None and body["end_at"] is None
    assert body["cron"] == "0 6 * * 1-5 | every 1h30m from 2026-01-01T00:15:00"
    got = api.get(f"/v1/schedules/{body['id']}").json()
    assert got["specs"] == body["specs"]
    res = api.get(f"/v1/schedules/{body['id']}/preview?count=40")
    assert res.status_code == 200, res.content
    shown = [dt.datetime.fromisoformat(o["scheduled_for"]) for o in res.json()["occurrences"]]
    now = dt.datetime.now(dt.UTC)
    want = sorted(
        set(cron.occurrences_between("0 6 * * 1-5", "Europe/Amsterdam", start=now,
                                     end=shown[-1], seed="")) |
        set(cron.occurrences_between("every 90m from 2026-01-01T00:15:00", "Europe/Amsterdam",
                                     start=now, end=shown[-1], seed=""))
    )  # fmt: skip
    assert shown == want
    stored = Schedule.objects.get(pk=body["id"])
    assert stored.next_run_at == shown[0]
    # Old clients: `cron` replaces the specs with one; giving both is a 400.
    body = patch(api, body["id"], {"cron": "0 7 * * *", "version": 1})
    assert body["specs"] == [{"cron": "0 7 * * *"}] and body["cron"] == "0 7 * * *"
    err = patch(api, body["id"], {"cron": "0 7 * * *", "specs": specs, "version": 2}, 400)
    assert "specs" in err["detail"]


def test_bounds_clamp_next_run_and_explain_names_them(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    start, end = now + dt.timedelta(days=3), now + dt.timedelta(days=5)
    body = create(
        api, seed_example | {"cron": "*/30 * * * *", "start_at": zulu(start), "end_at": zulu(end)}
    )
    assert body["start_at"] == zulu(start) and body["end_at"] == zulu(end)
    assert body["specs"] == [{"cron": "*/30 * * * *"}]
    stored = Schedule.objects.get(pk=body["id"])
    assert stored.next_run_at is not None and start <= stored.next_run_at < start + dt.timedelta(
        minutes=30
    )
    before = (start - dt.timedelta(days=1)).replace(minute=0)
    res = api.get(f"/v1/schedules/{body['id']}/explain?at={zulu(before)}")
    assert res.status_code == 200, res.content
    assert f"before start_at {zulu(start)}" in res.json()["sentence"], res.json()
    after = (end + dt.timedelta(hours=1)).replace(minute=0)
    res = api.get(f"/v1/schedules/{body['id']}/explain?at={zulu(after)}")
    assert f"at or after end_at {zulu(end)}" in res.json()["sentence"], res.json()
    # Clearing start_at moves next_run_at to the next half hour.
    body = patch(api, body["id"], {"start_at": None, "version": 1})
    assert body["start_at"] is None and body["end_at"] == zulu(end)
    stored.refresh_from_db()
    assert stored.next_run_at is not None and stored.next_run_at <= now + dt.timedelta(minutes=30)


@pytest.mark.parametrize(
    ("extra", "field", "why"),
    [
        ({"specs": [{"cron": "0 6 * * *"}, {"every": "30s", "anchor": "2026-01-01T00:00:00"}]},
         "specs[1].every", "at least 1m"),
        ({"specs": [{"cron": "0 25 * * *"}]}, "specs[0].cron", "hour"),
        ({"specs": [{"every": "1h"}]}, "specs[0].anchor", "is required"),
        ({"specs": [{"every": "1h", "anchor": "2026-01-01T00:00:00+01:00"}]},
         "specs[0].anchor", "without an offset"),
        ({"specs": [{"every": "soon", "anchor": "2026-01-01T00:00:00"}]},
         "specs[0].every", "not a duration"),
        ({"specs": [{"cron": "0 6 * * *", "every": "1h"}]}, "specs[0]", "either"),
        ({"specs": [{"cron": "0 6 * * *", "when": 1}]}, "specs[0].when", "unknown field"),
        ({"specs": []}, "specs", "1 to 20"),
        ({"specs": [{"cron": "* * * * *"}] * 21}, "specs", "1 to 20"),
        ({"start_at": "2027-02-01T00:00:00Z", "end_at": "2027-01-01T00:00:00Z"},
         "end_at", "after start_at"),
        ({"end_at": "2026-01-01T00:00:00Z"}, "end_at", "never run"),
        ({"cron": "0 0 29 2 *", "start_at": "2029-03-01T00:00:00Z",
          "end_at": "2031-01-01T00:00:00Z"}, "end_at", "never run"),
    ],
)  # fmt: skip
def test_bad_timing_is_400_naming_the_field_nothing_saved(
    api: APIClient, seed_example: dict[str, Any], extra: dict[str, Any], field: str, why: str
) -> None:
    body = seed_example | extra
    if "specs" in extra:
        body.pop("cron")
    err = create(api, body, 400)
    assert field in err["detail"], err
    assert why in " ".join(err["detail"][field]), err
    assert not Schedule.objects.exists()


def test_patch_bad_spec_leaves_the_schedule_alone(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    body = create(api, seed_example)
    before = Schedule.objects.get(pk=body["id"])
    err = patch(
        api,
        body["id"],
        {"specs": [{"cron": "0 6 * * *"}, {"every": "10s", "anchor": "2026-01-01T00:00"}],
         "version": 1},
        400,
    )  # fmt: skip
    assert "specs[1].every" in err["detail"]
    after = Schedule.objects.get(pk=body["id"])
    assert (after.cron, after.version, after.next_run_at) == (
        before.cron, before.version, before.next_run_at
    )  # fmt: skip


def test_one_off_refuses_bounds(api: APIClient, seed_example: dict[str, Any]) -> None:
    seed_example.pop("cron")
    run_at = zulu(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    err = create(api, seed_example | {"run_at": run_at, "end_at": "2030-01-01T00:00:00Z"}, 400)
    assert "end_at" in err["detail"]
