"""The execution timeline tells one story (issue 35, defect 8): each attempt's steps
in causal order — claimed, started, ended — with no second "started" / "finished"
copied from the row a few milliseconds off; a re-run's attempts named by the row's
attempt number (what X-Attempt says) with the try of its chain; and a re-run's wait
never called jitter. The runner runs in-process against a loopback receiver."""

from __future__ import annotations

import pytest

from dispatch import selectors, services
from dispatch.models import Execution
from dispatch.worker import runner
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.worker_support import make_execution, make_schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("ledger_allowed")]


def test_a_re_run_reads_as_attempt_two_in_causal_order(
    ledger: Ledger, admin_principal: Principal
) -> None:
    schedule = make_schedule(admin_principal, {"type": "http", "url": f"{ledger.url}/hook"})
    execution = make_execution(schedule)
    assert runner.run_execution(execution_id=str(execution.id), attempt=1) == "succeeded"
    services.execution_rerun(actor=admin_principal, execution_id=execution.id)
    assert runner.run_execution(execution_id=str(execution.id), attempt=2) == "succeeded"

    row = Execution.objects.select_related("schedule").get(pk=execution.pk)
    timeline = selectors.execution_timeline(execution=row)
    kinds = [item.kind for item in timeline]
    # The attempts' own steps, once each; the row's summaries would repeat them.
    assert "started" not in kinds and "finished" not in kinds, kinds
    assert [k for k in kinds if k in {"claimed", "attempt_started", "attempt_succeeded"}] == [
        "claimed",
        "attempt_started",
        "attempt_succeeded",
    ] * 2
    assert [item.at for item in timeline] == sorted(item.at for item in timeline)
    messages = {(item.kind, i): item.message for i, item in enumerate(timeline)}
    second = [m for (kind, _), m in messages.items() if kind.startswith("attempt_")][2:]
    assert second[0].startswith("attempt 2 (re-run, try 1) started by "), second
    assert second[1].startswith("attempt 2 (re-run, try 1) succeeded"), second
    first = [m for (kind, _), m in messages.items() if kind.startswith("attempt_")][:2]
    assert first[0].startswith("attempt 1 started by ") and first[1].startswith(
        "attempt 1 succeeded"
    )
    # The re-run made the row due again: said as such, not as jitter (the schedule has none).
    due = [item.message for item in timeline if item.kind == "due"]
    assert len(due) == 1 and due[0].startswith("due again: re-run 1 requested"), due
    assert not any("jitter" in item.message for item in timeline)
