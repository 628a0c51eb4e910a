"""A re-run's edited target must be a value PostgreSQL's jsonb can store, whoever
hands it over: the service answers NaN, Infinity, a NUL, a lone surrogate, runaway
nesting or a non-JSON value with a 400 naming the field (never a DataError or a
RecursionError), and `POST /v1/executions/{id}:rerun` refuses the same vectors as
JSON text. Nothing changes on the execution either way."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.exceptions import InvalidSchedule
from dispatch.models import Execution, Schedule
from tenants.models import AuditEvent
from tenants.roles import Principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook", "body": {"day": "mon"}}
SURROGATE = "contains an unpaired UTF-16 surrogate (not valid Unicode text)"
NOT_FINITE = "is not a finite number (NaN and Infinity cannot be stored)"


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _dead(principal: Principal) -> Execution:
    schedule: Schedule = services.schedule_create(
        actor=principal, data={"name": "nightly", "cron": "0 3 * * *", "target": TARGET}
    )
    at = services.db_now().replace(microsecond=0) - timedelta(hours=1)
    return execution_row(schedule, at, state="dead", attempt=3, fencing_token=3)


def _unchanged(execution: Execution, audits: int) -> None:
    row = Execution.objects.get(pk=execution.pk)
    assert (row.state, row.attempt, row.reruns, row.fencing_token) == ("dead", 3, 0, 3)
    assert row.target_override is None
    assert AuditEvent.objects.count() == audits


@pytest.mark.parametrize(
    "body,field,reason",
    [
        pytest.param(float("nan"), "target.body", NOT_FINITE, id="nan"),
        pytest.param({"n": float("inf")}, "target.body.n", NOT_FINITE, id="infinity"),
        pytest.param([1, float("-inf")], "target.body.1", NOT_FINITE, id="-infinity"),
        pytest.param({"note": "a\x00b"}, "target.body.note", "contains a NUL character", id="nul"),
        pytest.param({"note": "\ud800"}, "target.body.note", SURROGATE, id="surrogate"),
        pytest.param({"a\udc00": 1}, "target.body.a\\udc00", SURROGATE, id="surrogate-key"),
        pytest.param(_nested(3000), "target", "is nested deeper than 32 levels", id="deep"),
        pytest.param({"ids": {1, 2}}, "target.body.ids", "is not a JSON value (a set)", id="set"),
    ],
)
def test_the_service_refuses_what_jsonb_cannot_store_naming_the_field(
    admin_principal: Principal, body: Any, field: str, reason: str
) -> None:
    execution = _dead(admin_principal)
    audits = AuditEvent.objects.count()
    with pytest.raises(InvalidSchedule) as caught:
        services.execution_rerun(
            actor=admin_principal, execution_id=execution.id, target=TARGET | {"body": body}
        )
    assert caught.value.status == 400
    assert caught.value.detail == {field: [reason]}
    assert caught.value.message == f"{field}: {reason}"
    _unchanged(execution, audits)


def test_the_service_takes_nesting_up_to_the_limit(admin_principal: Principal) -> None:
    execution = _dead(admin_principal)
    # The target object is one level, so its body may nest 31 more.
    body = _nested(31)
    rerun = services.execution_rerun(
        actor=admin_principal, execution_id=execution.id, target=TARGET | {"body": body}
    )
    assert rerun.reruns == 1 and rerun.target_override["body"] == body


@pytest.mark.parametrize(
    "snippet,code,message",
    [
        ("NaN", "malformed", "JSON parse error - is not valid JSON (NaN is not a JSON number)"),
        (
            "Infinity",
            "malformed",
            "JSON parse error - is not valid JSON (Infinity is not a JSON number)",
        ),
        (
            "1e999",
            "malformed",
            "JSON parse error - is not valid JSON (the number 1e999 is out of range)",
        ),
        ('{"note": "a\\u0000b"}', "invalid", "target.body.note: contains a NUL character"),
        ('{"note": "\\ud800"}', "invalid", f"target.body.note: {SURROGATE}"),
        ('{"a\\udc00": 1}', "invalid", f"target.body.a\\udc00: {SURROGATE}"),
        ("[" * 3000 + "]" * 3000, "invalid", "is nested deeper than 32 levels"),
    ],
)
def test_the_api_rerun_refuses_the_same_vectors(
    api: APIClient, admin_principal: Principal, snippet: str, code: str, message: str
) -> None:
    execution = _dead(admin_principal)
    audits = AuditEvent.objects.count()
    text = (
        '{"target": {"type": "http", "url": "https://billing.internal/hook", '
        f'"body": {snippet}}}}}'
    )
    res = api.post(f"/v1/executions/{execution.id}:rerun", text, content_type="application/json")
    assert res.status_code == 400, res.content
    error = res.json()["error"]
    assert (error["code"], error["message"]) == (code, message)
    _unchanged(execution, audits)


def test_a_schedule_saved_from_python_is_held_to_the_same_rule(admin_principal: Principal) -> None:
    # The rule sits in clean_target, so every writer of a target (schedules, jobs,
    # re-runs) refuses the value before the INSERT could fail on it.
    with pytest.raises(InvalidSchedule) as caught:
        services.schedule_create(
            actor=admin_principal,
            data={"name": "nan", "cron": "0 3 * * *", "target": TARGET | {"body": float("nan")}},
        )
    assert caught.value.detail == {"target.body": [NOT_FINITE]}
    assert not Schedule.objects.filter(name="nan").exists()
