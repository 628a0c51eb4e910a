"""A Slack alert shows tenant-controlled text as written: a schedule's name or a
target's redirect Location holding Slack markup (`<!channel>`, a masked link
`<http://evil|click>`) is escaped (&amp; &lt; &gt;), the title keeps its bold."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from dispatch.alerting import decision, outbox
from dispatch.models import Alert, AlertChannel
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)


def test_slack_text_escapes_mentions_and_links(
    admin_principal: Principal, ledger: Ledger, settings: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="chat", kind="slack", config={"url": ledger.url}
    )
    schedule = make_schedule(
        admin_principal,
        {"type": "http", "url": "http://127.0.0.1:9/"},
        name="<!channel> nightly & co",
    )
    execution = execution_row(
        schedule,
        db_now() - timedelta(minutes=1),
        state="dead",
        reason_code="redirect",
        reason="HTTP 302: redirects are not followed (to <http://evil.example/login|click here>)",
    )
    assert decision.decide(execution_ids=[str(execution.id)]) == 1
    assert outbox.pump_once() == 1

    [request] = ledger.requests
    when = Alert.objects.get(execution_id=execution.id).payload["scheduled_for"]
    assert json.loads(request["body"]) == {
        "text": "*&lt;!channel&gt; nightly &amp; co: failed*\n"
        f"&lt;!channel&gt; nightly &amp; co ended dead for occurrence {when}: HTTP 302: "
        "redirects are not followed (to &lt;http://evil.example/login|click here&gt;)"
    }
