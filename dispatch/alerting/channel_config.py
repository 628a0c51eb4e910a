"""What an alert channel's `config` may hold, checked when it is saved.

  email    {"to": ["ops@example.com", ...]}
  slack    {"url": "https://hooks.slack.com/..." | {"secret": "<ref>"}}
  webhook  {"url": "https://..." | {"secret": "<ref>"}, "headers": {name: str | {"secret": "<ref>"}}}

A Slack-style incoming webhook URL *is* a credential (the token is in its path),
so it may be given as a secret reference; a URL given in clear is checked for
shape and by the SSRF guard now, like a target's, and every URL is checked
again by the guard on its resolved addresses when a message is sent.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from dispatch.exceptions import InvalidSchedule
from dispatch.states import ChannelKind
from dispatch.targets import http as http_target
from dispatch.targets.common import clean_secret_ref
from tenants.models import Tenant

MAX_RECIPIENTS = 20
KEYS = {
    ChannelKind.EMAIL: {"to"},
    ChannelKind.SLACK: {"url"},
    ChannelKind.WEBHOOK: {"url", "headers"},
}


def clean(kind: str, config: Any, *, tenant: Tenant) -> dict[str, Any]:
    """The stored form of `config` for a channel of `kind`; InvalidSchedule names the field."""
    if kind not in KEYS:
        raise InvalidSchedule.field("kind", f"must be one of {', '.join(sorted(KEYS))}")
    if not isinstance(config, dict):
        raise InvalidSchedule.field("config", "must be an object")
    unknown = sorted(set(config) - KEYS[ChannelKind(kind)])
    if unknown:
        raise InvalidSchedule.field(f"config.{unknown[0]}", "unknown field")
    if kind == ChannelKind.EMAIL:
        return {"to": _recipients(config.get("to"))}
    cleaned: dict[str, Any] = {"url": _url(config.get("url"), tenant=tenant)}
    if kind == ChannelKind.WEBHOOK:
        cleaned["headers"] = http_target.clean_headers(
            config.get("headers", {}), tenant=tenant, field="config.headers"
        )
    return cleaned


def _recipients(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_RECIPIENTS:
        raise InvalidSchedule.field(
            "config.to", f"must be a list of 1..{MAX_RECIPIENTS} email addresses"
        )
    out: list[str] = []
    for address in value:
        try:
            if not isinstance(address, str):
                raise ValidationError("not a string")
            validate_email(address)
        except ValidationError:
            raise InvalidSchedule.field(
                "config.to", f"{address!r} is not an email address"
            ) from None
        if address not in out:
            out.append(address)
    return out


def _url(value: Any, *, tenant: Tenant) -> str | dict[str, str]:
    if isinstance(value, dict):
        return clean_secret_ref(value, field="config.url", tenant=tenant)
    if not isinstance(value, str) or not value:
        raise InvalidSchedule.field(
            "config.url", 'is required: an http(s) URL or a secret reference {"secret": "..."}'
        )
    if len(value) > http_target.MAX_URL:
        raise InvalidSchedule.field(
            "config.url", f"must be at most {http_target.MAX_URL} characters"
        )
    return http_target.clean_url(value, tenant=tenant, field="config.url")
