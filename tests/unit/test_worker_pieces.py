"""Small pure pieces of the execution path: signatures, bounded capture with
redaction, task message parsing, rate parsing, secret names."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from datetime import UTC, datetime
from urllib.parse import quote, quote_plus

import pytest

from dispatch.targets import http
from dispatch.targets.runtime import RunContext, describe_exception, result_label
from dispatch.tasks import parse_message
from dispatch.worker import ratelimit, vault


def test_signature_is_hmac_sha256_over_timestamp_id_and_body() -> None:
    key, ts, eid, body = "k" * 64, 1700000000, "4f1c2a8e-0000-4000-8000-000000000001", b'{"a":1}'
    expected = hmac.new(key.encode(), f"{ts}.{eid}.".encode() + body, hashlib.sha256).hexdigest()
    assert http.sign(key, ts, eid, body) == f"sha256={expected}"
    # Any change to timestamp, id, body or key changes it.
    assert http.sign(key, ts + 1, eid, body) != http.sign(key, ts, eid, body)
    assert http.sign(key, ts, eid, body + b" ") != http.sign(key, ts, eid, body)
    assert http.sign("x" * 64, ts, eid, body) != http.sign(key, ts, eid, body)


def test_known_signature_vector() -> None:
    assert http.sign("secret", 1, "id", b"body") == (
        "sha256=" + hmac.new(b"secret", b"1.id.body", hashlib.sha256).hexdigest()
    )


def ctx(secrets: list[str], limit: int = 32) -> RunContext:
    c = RunContext(
        execution_id=str(uuid.uuid4()),
        scheduled_for=datetime.now(UTC),
        attempt=1,
        fencing_token=1,
        tenant_id=1,
        tenant_slug="t",
        signing_key="k",
        egress_allow=[],
        target={},
        timeout_s=1,
        excerpt_bytes=limit,
        resolve_secret=lambda ref: secrets.pop(0),
    )
    return c


def test_capture_keeps_a_bounded_head_and_counts_the_rest() -> None:
    c = ctx([])
    cap = c.capture()
    for _ in range(1000):
        cap.feed(b"x" * 1000)
    text = cap.text(c.redact_bytes)
    assert text.startswith("x" * 32) and "999968 bytes not stored" in text
    assert len(cap.head) <= 32 + cap.slack and cap.total == 1_000_000


def test_capture_redacts_a_secret_straddling_the_cut() -> None:
    c = ctx(["S3NTINEL-VALUE"])
    c.secret("vault:kv/t/x#k")
    cap = c.capture()
    cap.feed(b"a" * 25 + b"S3NTINEL-VALUE" + b"b" * 100)
    text = cap.text(c.redact_bytes)
    assert "S3N" not in text and "INEL" not in text and "-VALUE" not in text
    assert text.startswith("a" * 25 + "[redact")


def test_capture_with_tail_redacts_both_ends_and_strips_nul() -> None:
    c = ctx(["topsecret"])
    c.secret("env:X")
    cap = c.capture(keep_tail=True)
    cap.feed(b"topsecret\x00" + b"m" * 10_000 + b"end topsecret")
    text = cap.text(c.redact_bytes)
    assert "topsecret" not in text and text.count("[redacted]") == 2
    assert "\x00" not in text and text.rstrip().endswith("[redacted]")


def test_redact_also_covers_the_json_escaped_form() -> None:
    c = ctx(['a"b/c'])
    c.secret("env:X")
    assert c.redact('{"h": "a\\"b/c"}') == '{"h": "[redacted]"}'


def test_redact_covers_transformed_echoes() -> None:
    secret = "Fy/s3cr+t=v&w x:Q"
    c = ctx([secret])
    c.secret("env:X")
    raw = secret.encode()
    echoes = [
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        quote_plus(secret),
        secret.upper(),
        secret.swapcase(),
        raw.hex().upper(),
    ]
    for echo in echoes:
        assert c.redact(f"<{echo}>") == "<[redacted]>", echo
        assert c.redact_bytes(f"<{echo}>".encode()) == b"<[redacted]>", echo
    # Inside a larger base64 blob, at each alignment: the secret's own bits are gone.
    for prefix in (b"u:", b"us:", b"use:"):
        blob = base64.b64encode(prefix + raw + b"!").decode()
        redacted = c.redact(blob)
        assert "[redacted]" in redacted and len(redacted) < len(blob), blob


def test_short_secrets_are_redacted_verbatim_only() -> None:
    c = ctx(["ab1"])
    c.secret("env:X")
    assert c.redact("ab1 AB1 YWIx") == "[redacted] [redacted] YWIx"


def test_encoding_errors_are_described_without_the_character() -> None:
    try:
        "ok\u2603ok".encode("latin-1")
    except UnicodeEncodeError as exc:
        text = describe_exception(exc)
    assert "UnicodeEncodeError" in text and "latin-1" in text
    assert "\u2603" not in text and "\\u2603" not in text and "position" not in text


def test_parse_message() -> None:
    eid = str(uuid.uuid4())
    assert parse_message((eid, 1), {}) == (eid, 1)
    assert parse_message((), {"execution_id": eid, "attempt": 2}) == (eid, 2)
    for bad in [("nope", 1), (eid,), (eid, "1"), (eid, 0), (eid, True), (eid, 1, 2), (1, 1), ()]:
        assert parse_message(bad, {}) is None


@pytest.mark.parametrize(
    ("text", "per_s", "burst"),
    [("50/s", 50, 50), ("600/min", 10, 10), ("1/min", 1 / 60, 1), ("3600/hour", 1, 1)],
)
def test_parse_rate(text: str, per_s: float, burst: float) -> None:
    rate = ratelimit.parse_rate(text)
    assert rate.per_s == pytest.approx(per_s) and rate.burst == pytest.approx(burst)


@pytest.mark.parametrize("text", ["", "fast", "0/s", "5/fortnight"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        ratelimit.parse_rate(text)


def test_env_secret_names_are_tenant_scoped() -> None:
    assert vault.env_name("billing", "API_TOKEN") == "SCHED_SECRET_BILLING__API_TOKEN"
    assert vault.env_name("data-eng", "X") == "SCHED_SECRET_DATA_ENG__X"


def test_env_secret_names_are_injective() -> None:
    # These pairs were one variable each with a single "_" between tenant and name.
    assert vault.env_name("alpha", "EU_DBPASS") != vault.env_name("alpha-eu", "DBPASS")
    assert vault.env_name("a", "B_C") != vault.env_name("a-b", "C")
    slugs = ["a", "a-b", "a-b-c", "ab", "a1", "alpha", "alpha-eu", "alpha-eu-1"]
    names = ["B", "B_C", "C", "EU_DBPASS", "DBPASS", "EU", "X_", "B_C_D", "C_D"]
    seen: dict[str, tuple[str, str]] = {}
    for slug in slugs:
        for name in names:
            var = vault.env_name(slug, name)
            assert var not in seen, (var, seen.get(var), (slug, name))
            seen[var] = (slug, name)


def test_http_status_classification() -> None:
    assert http.classify(204) == (True, False)
    assert http.classify(500) == (False, True)
    assert http.classify(503) == (False, True)
    assert http.classify(429) == (False, True)
    assert http.classify(404) == (False, False)
    assert http.classify(302) == (False, False)


def test_an_attempts_result_label_prefers_the_http_status_then_the_exit_code() -> None:
    assert result_label(503, None) == "HTTP 503"
    assert result_label(200, 0) == "HTTP 200"
    assert result_label(None, 0) == "exit 0"
    assert result_label(None, 2) == "exit 2"
    assert result_label(None, None) == ""
