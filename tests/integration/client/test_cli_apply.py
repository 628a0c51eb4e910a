"""Schedules as code through `schedctl apply` / `export` against a live server:
the diff a dry run prints (next fire times that change included), the CI exit
codes, prune, folders, and the round trip export → apply --dry-run = no changes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.client_support import TARGET, Tenant, definition, make_tenant
from tests.support.procs import WebServer

from scheduler_client import Client, Conflict  # isort: skip
from scheduler_client.cli import main  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def owner(db: Any, server: WebServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tenant:
    tenant = make_tenant("billing")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SCHEDCTL_URL", server.url)
    monkeypatch.setenv("SCHEDCTL_TOKEN", tenant.token)
    return tenant


def owner_url() -> str:
    return os.environ["SCHEDCTL_URL"]


def schedctl(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


FILE = """\
schedules:
  - name: extract
    cron: "0 2 * * *"
    timezone: Europe/Amsterdam
    target: {type: http, method: POST, url: "https://billing.internal/extract"}
  - name: load
    cron: "30 2 * * *"
    timezone: Europe/Amsterdam
    target: {type: http, method: POST, url: "https://billing.internal/load"}
    depends_on: [extract]
  - name: report
    cron: "0 9 * * 1-5"
    timezone: Europe/Amsterdam
    target: {type: http, method: POST, url: "https://billing.internal/report"}
    paused: true
"""


def test_apply_then_export_round_trips_with_no_changes(owner: Tenant, tmp_path: Path) -> None:
    source = tmp_path / "schedules.yaml"
    source.write_text(FILE)

    code, out, err = schedctl("apply", "-f", str(source), "--dry-run", "--exit-code")
    assert code == 3, err  # three to create: a CI check fails
    lines = out.splitlines()
    assert lines[0] == "+ create extract"
    assert lines[1].startswith("    next runs: ") and len(lines[1].split(", ")) == 5
    assert out.splitlines()[-1] == "dry run: 3 to create, 0 to update, 0 to delete, 0 unchanged"
    client = Client(owner_url(), owner.token)
    assert list(client.list_schedules()) == []  # a dry run writes nothing

    code, out, err = schedctl("apply", "-f", str(source))
    assert code == 0, err
    assert [line.split()[:3] for line in out.splitlines() if line[:1] in "+~-"] == [
        ["+", "create", "extract"],
        ["+", "create", "load"],
        ["+", "create", "report"],
    ]
    assert out.splitlines()[-1] == "3 created, 0 updated, 0 deleted, 0 unchanged"
    by_name = {s.name: s for s in client.list_schedules()}
    assert by_name["report"].paused is True
    assert by_name["load"].depends_on == [by_name["extract"].id]

    assert schedctl("apply", "-f", str(source), "--dry-run", "--exit-code")[0] == 0

    exported = tmp_path / "exported.yaml"
    code, _, err = schedctl("export", "-o", str(exported))
    assert code == 0 and "exported 3 schedules" in err
    document = yaml.safe_load(exported.read_text())
    assert [d["name"] for d in document["schedules"]] == ["extract", "load", "report"]
    assert document["schedules"][1]["depends_on"] == ["extract"]  # names, not ids
    code, out, _ = schedctl("apply", "-f", str(exported), "--dry-run", "--prune", "--exit-code")
    assert code == 0, out
    assert out.splitlines() == ["dry run: 0 to create, 0 to update, 0 to delete, 3 unchanged"]
    code, out, _ = schedctl("export", "--json")
    assert code == 0 and json.loads(out) == document


def test_a_dry_run_diff_shows_fields_and_the_next_runs_that_change(
    owner: Tenant, tmp_path: Path
) -> None:
    source = tmp_path / "schedules.yaml"
    source.write_text(FILE)
    assert schedctl("apply", "-f", str(source))[0] == 0
    source.write_text(FILE.replace('cron: "0 2 * * *"', 'cron: "0 3 * * *"'))

    code, out, err = schedctl("apply", "-f", str(source), "--dry-run", "--exit-code")
    assert code == 3, err
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("~ update extract")))
    assert lines[start + 1] == '    cron: "0 2 * * *" -> "0 3 * * *"'
    before = lines[start + 2].removeprefix("    next runs before: ").split(", ")
    after = lines[start + 3].removeprefix("    next runs after:  ").split(", ")
    assert len(before) == len(after) == 5 and before != after
    # One hour later, every one of them (the same zone, the same DST rules).
    assert [a[11:13] for a in after] == [f"{int(b[11:13]) + 1:02d}" for b in before]
    assert lines[-1] == "dry run: 0 to create, 1 to update, 0 to delete, 2 unchanged"
    client = Client(owner_url(), owner.token)
    assert client.find_schedule("extract").cron == "0 2 * * *"  # nothing written

    as_json = schedctl("apply", "-f", str(source), "--dry-run", "--json")
    assert as_json[0] == 0
    change = json.loads(as_json[1])["changes"][0]
    assert change["action"] == "update" and change["fields"]["cron"]["after"] == "0 3 * * *"

    assert schedctl("apply", "-f", str(source))[0] == 0
    assert client.find_schedule("extract").cron == "0 3 * * *"


def test_prune_deletes_what_the_files_no_longer_name(owner: Tenant, tmp_path: Path) -> None:
    folder = tmp_path / "schedules"
    folder.mkdir()
    document = yaml.safe_load(FILE)
    (folder / "a.yaml").write_text(yaml.safe_dump({"schedules": document["schedules"][:2]}))
    (folder / "b.yml").write_text(yaml.safe_dump({"schedules": document["schedules"][2:]}))
    (folder / "notes.txt").write_text("not a definition")
    assert schedctl("apply", "-f", str(folder))[0] == 0
    client = Client(owner_url(), owner.token)
    job = client.create_job({"name": "one-off", "target": TARGET, "run_at": "2030-01-01T00:00:00Z"})

    (folder / "b.yml").unlink()
    code, out, _ = schedctl("apply", "-f", str(folder), "--prune", "--dry-run", "--exit-code")
    assert code == 3
    assert "- delete report" in out and "one-off" not in out  # jobs are not definitions
    assert sorted(s.name for s in client.list_schedules(kind="cron")) == [
        "extract",
        "load",
        "report",
    ]
    code, out, _ = schedctl("apply", "-f", str(folder), "--prune")
    assert code == 0 and out.splitlines()[-1] == "0 created, 0 updated, 1 deleted, 2 unchanged"
    assert sorted(s.name for s in client.list_schedules(kind="cron")) == ["extract", "load"]
    assert client.get_job(job.id).id == job.id

    # Without --prune a schedule missing from the files stays.
    (folder / "a.yaml").write_text(yaml.safe_dump({"schedules": document["schedules"][:1]}))
    assert schedctl("apply", "-f", str(folder), "--dry-run", "--exit-code")[0] == 0


def test_bad_files_and_refused_applies_exit_as_ci_expects(owner: Tenant, tmp_path: Path) -> None:
    folder = tmp_path / "twice"
    folder.mkdir()
    one = {"schedules": [definition("same")]}
    (folder / "a.yaml").write_text(yaml.safe_dump(one))
    (folder / "b.yaml").write_text(yaml.safe_dump(one))
    code, _, err = schedctl("apply", "-f", str(folder))
    assert code == 2
    assert "'same' is defined twice" in err and "a.yaml" in err and "b.yaml" in err

    broken = tmp_path / "broken.yaml"
    broken.write_text("schedules:\n  - name: x\n    cron: [unclosed\n")
    code, _, err = schedctl("apply", "-f", str(broken))
    assert code == 2 and err.startswith("error: ") and "broken.yaml" in err

    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        yaml.safe_dump({"schedules": [definition("ok"), definition("bad", "0 99 * * *")]})
    )
    code, _, err = schedctl("apply", "-f", str(invalid))
    assert code == 2 and "schedules[1].cron" in err  # the API's 400, naming the item
    client = Client(owner_url(), owner.token)
    assert list(client.list_schedules()) == []  # all or nothing

    assert schedctl("apply", "-f", str(tmp_path / "missing.yaml"))[0] == 2

    # A stale "version" is the API's 409: exit 1, nothing applied.
    first = client.apply_schedules([definition("versioned")])
    assert first["summary"] == {"create": 1, "update": 0, "unchanged": 0, "delete": 0}
    client.apply_schedules([definition("versioned", jitter_s=5)])
    stale = tmp_path / "stale.yaml"
    stale.write_text(
        yaml.safe_dump({"schedules": [definition("versioned", jitter_s=9, version=1)]})
    )
    code, _, err = schedctl("apply", "-f", str(stale))
    assert code == 1 and err.startswith("error: ")
    with pytest.raises(Conflict):
        client.apply_schedules([definition("versioned", jitter_s=9, version=1)])
    assert client.find_schedule("versioned").jitter_s == 5
    assert [(d["name"], d["jitter_s"]) for d in client.export_schedules()] == [("versioned", 5)]


CALENDARS = """\
calendars:
  - name: NL holidays
    sources: [{type: holidays, country: NL}]
schedules:
  - name: payroll
    cron: "0 6 * * 1-5"
    timezone: Europe/Amsterdam
    target: {type: http, method: POST, url: "https://billing.internal/payroll"}
    exclude_calendars: [NL holidays]
"""


def test_calendars_in_the_files_are_applied_first_and_exported(
    owner: Tenant, tmp_path: Path
) -> None:
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "a.yaml").write_text(CALENDARS)
    code, out, err = schedctl("apply", "-f", str(folder), "--dry-run", "--exit-code")
    assert code == 3, err
    lines = out.splitlines()
    assert lines[0] == "+ create calendar NL holidays"
    assert lines[-1] == "dry run: calendars: 1 to create, 0 to update, 0 to delete, 0 unchanged"
    assert schedctl("apply", "-f", str(folder))[0] == 0
    client = Client(owner_url(), owner.token)
    assert client.find_schedule("payroll").exclude_calendars == ["NL holidays"]

    exported = tmp_path / "exported.yaml"
    code, _, err = schedctl("export", "-o", str(exported))
    assert code == 0 and "exported 1 schedule and 1 calendar to" in err  # not "1 schedules"
    document = yaml.safe_load(exported.read_text())
    assert [c["name"] for c in document["calendars"]] == ["NL holidays"]
    code, out, _ = schedctl("apply", "-f", str(exported), "--dry-run", "--prune", "--exit-code")
    assert code == 0, out

    # A calendar twice across the files names both places; a file of calendars alone
    # with --prune owns them: the unused one goes, the schedules are pruned too.
    (folder / "b.yaml").write_text(CALENDARS.split("schedules:")[0])
    code, _, err = schedctl("apply", "-f", str(folder))
    assert code == 2 and "calendar 'NL holidays' is defined twice" in err
    (folder / "a.yaml").unlink()
    code, out, _ = schedctl("apply", "-f", str(folder), "--prune")
    assert code == 0, out
    assert "- delete payroll" in out and "NL holidays" not in out  # kept: in the file
    (folder / "b.yaml").write_text("calendars: []\n")
    code, out, _ = schedctl("apply", "-f", str(folder), "--prune")
    assert code == 0 and "- delete calendar NL holidays" in out, out
    assert client.export_definitions()["calendars"] == []
