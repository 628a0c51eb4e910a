"""`schedctl import k8s`: a manifest with several CronJobs (timeZone, suspend, Forbid,
Replace, startingDeadlineSeconds, a CRON_TZ prefix, a bad schedule) and a Deployment;
the listed runs compared with the platform's preview, locally and after --apply."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.roles import Role
from tests.support.importing import (
    SAMPLES,
    Client,
    platform_runs,
    run_import,
    run_text,
    server_previews,
)
from tests.support.procs import WebServer

AFTER = datetime(2026, 3, 27, tzinfo=UTC)
AFTER_ARG = ["--after", "2026-03-27T00:00:00Z"]
TEMPLATE = (
    '{"type": "http", "method": "POST", "url": "https://jobs.internal/k8s/{name}",'
    ' "body": "{image} {command}", "timeout_s": 60}'
)
MANIFEST = str(SAMPLES / "cronjobs.yaml")


def test_cronjobs_mapped_and_other_kinds_reported() -> None:
    code, doc, _ = run_import(["k8s", MANIFEST, "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 4
    defs = {d["name"]: d for d in doc["definitions"]}
    # Two namespaces in the file: names carry the namespace.
    assert list(defs) == [
        "billing-invoice-run",
        "web-cache-warmer",
        "billing-legacy-report",
        "web-weekly-cleanup",
    ]
    invoice = defs["billing-invoice-run"]
    assert {k: v for k, v in invoice.items() if k != "next_runs"} == {
        "name": "billing-invoice-run",
        "cron": "0 6 * * 1-5",
        "timezone": "Europe/Berlin",
        "target": {
            "type": "http",
            "method": "POST",
            "url": "https://jobs.internal/k8s/billing-invoice-run",
            "body": "registry.example.com/billing/invoices:1.14.2 python -m billing.run --batch daily",
            "timeout_s": 900,  # activeDeadlineSeconds
        },
        "concurrency": "forbid",
        "misfire": "run_once",
        "misfire_grace_s": 300,  # startingDeadlineSeconds
        "retry": {"max_attempts": 3},  # backoffLimit 2 + the first attempt
    }
    warmer = defs["web-cache-warmer"]
    assert warmer["paused"] is True and warmer["concurrency"] == "replace"
    assert "misfire" not in warmer  # no deadline: the platform's default policy
    assert warmer["timezone"] == "UTC"
    legacy = defs["billing-legacy-report"]
    assert (legacy["cron"], legacy["timezone"]) == ("30 23 * * *", "America/Chicago")
    assert defs["web-weekly-cleanup"]["cron"] == "@weekly"
    assert defs["web-weekly-cleanup"]["target"]["body"] == "busybox:1.36 sh -c 'rm -rf /cache/*'"

    reasons = [(p["line"], p["text"], p["reason"]) for p in doc["problems"]]
    assert (1, "CronJob invoice-run", "successfulJobsHistoryLimit has no equivalent: the "
            "platform keeps run history by its retention settings") in reasons  # fmt: skip
    assert any(r[0] == 3 and "rejected by Kubernetes since 1.27" in r[2] for r in reasons)
    assert (5, "CronJob broken-schedule",
            "schedule '0 25 * * *' in UTC: field 'hour': 25 is out of range 0-23") in reasons  # fmt: skip
    assert (6, "Deployment web", "kind Deployment is not a CronJob: not imported") in reasons

    for d in doc["definitions"]:
        assert d["next_runs"] == platform_runs(d["cron"], d["timezone"], AFTER), d["name"]


def test_list_kind_and_single_namespace(tmp_path: Any) -> None:
    manifest = tmp_path / "list.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: batch/v1\n  kind: CronJob\n  metadata: {name: a, namespace: ops}\n"
        "  spec: {schedule: '5 4 * * *', jobTemplate: {spec: {template: {spec: "
        "{containers: [{name: c, image: 'x:1'}]}}}}}\n"
    )
    code, doc, _ = run_import(["k8s", str(manifest), "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 0 and doc["problems"] == []
    assert [d["name"] for d in doc["definitions"]] == ["a"]  # one namespace: the bare name
    assert doc["definitions"][0]["concurrency"] == "allow"  # Kubernetes' default policy


def test_unreadable_manifest_is_exit_2(tmp_path: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    code, text = run_text(["k8s", str(bad), "--target-template", TEMPLATE])
    assert code == 2 and "not YAML" in text
    code, text = run_text(["k8s", MANIFEST])
    assert code == 2 and "--target-template is required for CronJobs" in text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the live server reads committed rows
def test_apply_then_server_preview_pause_and_policies(server: WebServer) -> None:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    _, token = tenant_services.token_issue(tenant=tenant, name="ci", role=Role.OPERATOR)
    with Client(server.url, token) as client:
        code, doc, _ = run_import(
            ["k8s", MANIFEST, "--target-template", TEMPLATE, "--apply", *AFTER_ARG], client
        )
        assert code == 4
        assert doc["applied"]["summary"]["create"] == 4
        previews = server_previews(client, doc["applied"], "2026-03-27T00:00:00Z")
    assert previews == {d["name"]: d["next_runs"] for d in doc["definitions"]}
    invoice = Schedule.objects.get(tenant=tenant, name="billing-invoice-run")
    assert (invoice.overlap, invoice.misfire, invoice.misfire_grace_s) == (
        "forbid",
        "run_once",
        300,
    )
    assert invoice.retry["max_attempts"] == 3 and invoice.timeout_s == 900
    assert Schedule.objects.get(tenant=tenant, name="web-cache-warmer").paused is True


def test_text_output_names_documents() -> None:
    code, text = run_text(["k8s", MANIFEST, "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 4
    assert f"{MANIFEST} (document 6): Deployment web" in text
    assert "options   concurrency=replace paused" in text
