"""Every outbound call of the platform's control work ends by ONE total deadline: a
peer that dribbles its answer a byte at a time (each read well inside any per-read
timeout) cannot hold an alert send or a calendar feed fetch past it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dispatch.alerting import delivery
from dispatch.models import AlertChannel
from dispatch.targets import http as http_target
from dispatch.targets import netguard
from tenants.models import Tenant
from tests.support.dribbler import Dribbler


@pytest.fixture
def dribbler(settings: Any) -> Iterator[Dribbler]:
    # 40 bytes at 0.3 s each: 12 s for the whole answer, every read inside 0.3 s.
    with Dribbler(gap_s=0.3, count=40) as peer:
        settings.TARGET_TEST_ALLOW = [f"127.0.0.1:{peer.port}"]
        yield peer


def test_bounded_request_ends_at_its_deadline_however_the_peer_dribbles(
    dribbler: Dribbler,
) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"within 1\.5 s"):
        http_target.bounded_request(
            "GET",
            f"http://127.0.0.1:{dribbler.port}/slow",
            allow=netguard.AllowList.parse([]),
            deadline_s=1.5,
            max_bytes=1000,
        )
    # Far less than the 12 s the peer would take (not a timing goal: the proof that the
    # call was cut rather than read to the end).
    assert time.monotonic() - started < 6


def test_bounded_request_reads_a_prompt_answer_whole(settings: Any) -> None:
    with Dribbler(gap_s=0.0, count=40) as peer:
        settings.TARGET_TEST_ALLOW = [f"127.0.0.1:{peer.port}"]
        answer = http_target.bounded_request(
            "GET",
            f"http://127.0.0.1:{peer.port}/",
            allow=netguard.AllowList.parse([]),
            deadline_s=5,
            max_bytes=1000,
        )
    assert (answer.status, answer.body) == (200, b"x" * 40)


@pytest.mark.django_db
def test_an_alert_to_a_dribbling_webhook_fails_at_the_deadline(
    dribbler: Dribbler, settings: Any
) -> None:
    settings.ALERT_WEBHOOK_TIMEOUT_S = 1
    tenant = Tenant.objects.create(slug="slowpeer", name="Slow peer")
    channel = AlertChannel.objects.create(
        tenant=tenant,
        name="slow",
        kind="webhook",
        config={"url": f"http://127.0.0.1:{dribbler.port}/hook", "headers": {}},
    )
    message = delivery.Message(event="alert.test", title="t", text="x")
    result = delivery.send(channel, message, tenant=tenant)
    assert not result.ok
    assert result.detail == "TimeoutError: no complete answer within 1 s"


@pytest.mark.django_db
def test_an_ics_feed_that_dribbles_is_refused_at_the_deadline(
    dribbler: Dribbler, settings: Any, api: Any
) -> None:
    settings.CALENDAR_FETCH_TIMEOUT_S = 1
    res = api.post(
        "/v1/calendars",
        {
            "name": "slow",
            "sources": [{"type": "ics", "url": f"http://127.0.0.1:{dribbler.port}/x.ics"}],
        },
        format="json",
    )
    assert res.status_code == 400, res.content
    assert res.json()["error"]["detail"] == {"sources[0].url": ["could not be fetched within 1 s"]}


@pytest.mark.django_db
def test_an_alert_email_to_a_relay_that_dribbles_its_greeting_fails_at_the_deadline(
    settings: Any,
) -> None:
    settings.ALERT_WEBHOOK_TIMEOUT_S = 1
    # A greeting of 40 continuation lines, one every 0.3 s: each read well inside
    # EMAIL_TIMEOUT, 12 s in all.
    with Dribbler(
        gap_s=0.3, count=40, head=b"", unit=b"220-still greeting\r\n", reads_first=False
    ) as relay:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", relay.port
        settings.EMAIL_TIMEOUT = 10
        settings.EMAIL_USE_TLS = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        tenant = Tenant.objects.create(slug="slowrelay", name="Slow relay")
        channel = AlertChannel.objects.create(
            tenant=tenant, name="mail", kind="email", config={"to": ["ops@slowrelay.test"]}
        )
        message = delivery.Message(event="alert.test", title="t", text="x")
        result = delivery.send(channel, message, tenant=tenant)
        assert relay.connections == 1
    assert result == delivery.Delivery(False, "TimeoutError: no complete answer within 1 s")
