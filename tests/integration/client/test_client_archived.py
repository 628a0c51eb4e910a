"""An archived execution answered everywhere a tenant looks: the REST API (through the
Python client, against a live gunicorn reading the same archive folder), `schedctl
execution` and `schedctl logs` and the console's execution page — each saying it was
archived and where, its kept log read back from the archive — while another tenant's
token gets the same 404 as for a missing id."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from dispatch import logs
from dispatch.history import archive, partitions
from dispatch.history.objects import FileStore
from dispatch.models import Execution
from dispatch.services.logs import keep_attempt_log
from tenants import services as tenant_services
from tenants.models import Tenant as TenantModel
from tenants.roles import Role
from tests.conftest import make_principal
from tests.support.client_support import live_server, make_tenant
from tests.support.console_support import client_for, user
from tests.support.history import restore_days
from tests.support.procs import WebServer
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

from scheduler_client import Client, NotFound  # isort: skip
from scheduler_client.cli import main  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LOG = ["exported 12 rows", "archived-line ☃"]


@pytest.fixture(scope="module")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archive")


@pytest.fixture(scope="module")
def server(
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    archive_dir: Path,
) -> Iterator[WebServer]:
    with (
        django_db_blocker.unblock(),
        live_server(tmp_path_factory.mktemp("web"), HISTORY_ARCHIVE_URL=str(archive_dir)) as web,
    ):
        yield web


@pytest.fixture
def archived(archive_dir: Path) -> Iterator[tuple[Any, Any, Execution]]:
    """Two tenants; one execution of the first in a day archived and dropped."""
    owner, outsider = make_tenant("billing"), make_tenant("payroll")
    principal = make_principal(TenantModel.objects.get(slug="billing"))
    schedule = make_schedule(
        principal, {"type": "http", "url": "https://billing.internal/h"}, name="nightly"
    )
    today = partitions.day_start(partitions.day_of(db_now()))
    execution = execution_row(
        schedule, today + timedelta(hours=2), state="succeeded", status_code=204
    )
    # Its attempt's log, kept with it as an ended attempt's log is (then archived with it).
    logs.append(str(execution.id), 1, "output", LOG, fencing_token=1)
    assert keep_attempt_log(execution.id, 1, actor="test")
    with override_settings(RETENTION_DAYS=1, RETENTION_MISFIRE_HORIZON_S=0):
        done = archive.archive_expired(
            now=today + timedelta(days=2, hours=12), store=FileStore(archive_dir)
        )
    assert [r.dropped for r in done if r.day == today.date()] == [True]
    assert not Execution.objects.filter(id=execution.id).exists()
    yield owner, outsider, execution
    restore_days()


def test_the_api_and_schedctl_answer_an_archived_execution(
    server: WebServer, archived: tuple[Any, Any, Execution], archive_dir: Path, monkeypatch: Any
) -> None:
    owner, outsider, execution = archived
    day = execution.scheduled_for.date()
    location = FileStore(archive_dir).url(
        archive.file_key(partitions.EXECUTIONS, day, int(owner.id))
    )
    with Client(server.url, owner.token) as client:
        got = client.get_execution(str(execution.id))
    assert (got.id, got.state, got.status_code) == (str(execution.id), "succeeded", 204)
    assert got.archived is not None
    assert (got.archived["day"], got.archived["location"]) == (day.isoformat(), location)
    assert got.archived["manifest"] == FileStore(archive_dir).url(archive.manifest_key(day))

    with Client(server.url, outsider.token) as other, pytest.raises(NotFound):
        other.get_execution(str(execution.id))
    with Client(server.url, outsider.token) as other, pytest.raises(NotFound):
        other.execution_logs(str(execution.id))

    # Its log, as the archive kept it, paged by the same cursors.
    with Client(server.url, owner.token) as client:
        page = client.execution_logs(str(execution.id), attempt=1)
        assert [x["text"] for x in page["lines"]] == LOG and page["live"] is False
        rest = client.execution_logs(str(execution.id), after=page["lines"][0]["cursor"])
        assert [x["text"] for x in rest["lines"]] == LOG[1:]

    monkeypatch.setenv("SCHEDCTL_URL", server.url)
    monkeypatch.setenv("SCHEDCTL_TOKEN", owner.token)
    out, err = io.StringIO(), io.StringIO()
    assert main(["execution", str(execution.id)], out=out, err=err) == 0, err.getvalue()
    assert f"archived: its day ({day.isoformat()}, UTC)" in out.getvalue()
    assert location in out.getvalue() and "status_code: 204" in out.getvalue()
    out = io.StringIO()
    assert main(["logs", str(execution.id)], out=out, err=err) == 0, err.getvalue()
    assert [line.split(None, 2)[2] for line in out.getvalue().splitlines()] == LOG


def test_the_console_page_says_archived_and_offers_no_control(
    archived: tuple[Any, Any, Execution], archive_dir: Path
) -> None:
    execution = archived[2]
    pages = {}
    for slug, name in (("billing", "olga"), ("payroll", "oscar")):
        member = user(name)
        tenant = TenantModel.objects.get(slug=slug)
        tenant_services.membership_set(tenant=tenant, user=member, role=Role.OPERATOR, actor=None)
        pages[slug] = client_for(member)
    with override_settings(HISTORY_ARCHIVE_URL=str(archive_dir)):
        page = pages["billing"].get(f"/executions/{execution.id}/")
        assert page.status_code == 200
        html = page.content.decode()
        assert 'id="archived"' in html and "archived" in html
        assert "re-run that occurrence with a backfill" in html
        assert 'id="rerun-execution" disabled' in html
        assert ">archived-line ☃</span>" in html and 'id="live-log-follow"' not in html

        assert pages["payroll"].get(f"/executions/{execution.id}/").status_code == 404
