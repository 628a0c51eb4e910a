"""`schedctl import crontab`: a real user crontab (CRON_TZ, MAILTO, @reboot, `%`,
bad lines) and Debian's /etc/crontab, each definition's listed runs compared with
the platform's own preview — locally for the dry listing, and through the API
(`GET /v1/schedules/{id}/preview`) after --apply."""

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

# A fixed instant (the week Europe springs forward), never the time of day.
AFTER = datetime(2026, 3, 27, tzinfo=UTC)
AFTER_ARG = ["--after", "2026-03-27T00:00:00Z"]
TEMPLATE = '{"type": "http", "method": "POST", "url": "https://jobs.internal/run/{name}", "body": "{command}"}'
USER = str(SAMPLES / "user-crontab")
SYSTEM = str(SAMPLES / "debian-etc-crontab")


def by_line(problems: list[dict[str, Any]]) -> dict[int, str]:
    return {p["line"]: p["reason"] for p in problems}


def test_user_crontab_definitions_problems_and_runs() -> None:
    code, doc, _ = run_import(["crontab", USER, "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 4  # problems were found; the definitions are still listed
    defs = {d["name"]: d for d in doc["definitions"]}
    assert list(defs) == [
        "nightly-orders",  # the trailing `# name:` comment
        "sync-inventory",  # options say how, not what
        "monthly-or-monday",  # a script's name without its extension
        "rotate-reports",
        "rotate-reports-2",  # the same command twice: made unique
        "send-digest-us-team",
        "find-reports",  # a path argument by its last part
        "mysqldump-shop",  # the pipe and the redirection are not the job
        "long-command",
    ]
    nightly = defs["nightly-orders"]
    assert nightly["cron"] == "30 2 * * *" and nightly["timezone"] == "Europe/Amsterdam"
    assert nightly["target"] == {
        "type": "http",
        "method": "POST",
        "url": "https://jobs.internal/run/nightly-orders",
        "body": "/usr/local/bin/export-orders --since=yesterday",
    }
    # CRON_TZ applies to the lines after it, as cronie does.
    assert defs["send-digest-us-team"]["timezone"] == "America/New_York"
    assert defs["rotate-reports"]["cron"] == "@daily"
    # An escaped \% is a literal percent sign in cron.
    assert "$(date +%F)" in defs["mysqldump-shop"]["target"]["body"]

    problems = by_line(doc["problems"])
    assert sorted(problems) == [2, 3, 4, 18, 20, 21, 22, 23, 24]
    assert problems[2].startswith("MAILTO has no equivalent")
    assert problems[3].startswith("PATH has no equivalent")
    assert "REPORT_ENV" in problems[4]
    assert "@reboot is not supported" in problems[18]
    assert "stdin" in problems[20]
    assert problems[21] == "field 'minute': 61 is out of range 0-59"  # the platform's reason
    assert problems[22] == "field 'day of week': 8 is out of range 0-7"
    assert "no line continuation" in problems[23]
    assert "not a crontab entry" in problems[24]

    for d in doc["definitions"]:
        assert d["next_runs"] == platform_runs(d["cron"], d["timezone"], AFTER), d["name"]
    # The spring-forward night: 02:30 does not exist in Amsterdam, it runs at 03:00 CEST.
    assert nightly["next_runs"][2] == "2026-03-29T01:00:00Z"


def test_both_day_fields_are_ored_like_cron() -> None:
    """`0 9 1 * 1`: cron runs on the 1st AND on every Monday; so does the import."""
    _, doc, _ = run_import(["crontab", USER, "--target-template", TEMPLATE, *AFTER_ARG])
    runs = next(d for d in doc["definitions"] if d["name"] == "monthly-or-monday")["next_runs"]
    days = [datetime.fromisoformat(r.replace("Z", "+00:00")).date() for r in runs]
    assert [str(d) for d in days] == [
        "2026-03-30",  # a Monday
        "2026-04-01",  # the 1st, a Wednesday
        "2026-04-06",
        "2026-04-13",
        "2026-04-20",
    ]


def test_system_crontab_user_column(tmp_path: Any) -> None:
    out = tmp_path / "schedules.yaml"
    code, doc, _ = run_import(
        ["crontab", "--system", SYSTEM, "--tz", "Europe/Berlin", "--target-template", TEMPLATE,
         "-o", str(out), *AFTER_ARG]
    )  # fmt: skip
    assert code == 4
    assert [(d["cron"], d["timezone"]) for d in doc["definitions"]] == [
        ("17 * * * *", "Europe/Berlin"),
        ("25 6 * * *", "Europe/Berlin"),
        ("47 6 * * 7", "Europe/Berlin"),
        ("52 6 1 * *", "Europe/Berlin"),
    ]
    assert doc["definitions"][0]["target"]["body"] == "cd / && run-parts --report /etc/cron.hourly"
    problems = by_line(doc["problems"])
    assert problems[7].startswith("SHELL has no equivalent")
    assert all("runs as user 'root'" in problems[n] for n in (19, 20, 21, 22))
    for d in doc["definitions"]:
        assert d["next_runs"] == platform_runs(d["cron"], d["timezone"], AFTER)
    import yaml

    written = yaml.safe_load(out.read_text())
    assert written == {"schedules": [
        {k: v for k, v in d.items() if k != "next_runs"} for d in doc["definitions"]
    ]}  # fmt: skip


def test_without_a_template_is_a_clear_usage_error() -> None:
    code, text = run_text(["crontab", USER])
    assert code == 2
    assert "error: --target-template is required for crontab lines" in text


def test_unreadable_input_is_exit_2(tmp_path: Any) -> None:
    code, text = run_text(["crontab", str(tmp_path / "missing"), "--target-template", TEMPLATE])
    assert code == 2 and "cannot read" in text
    code, text = run_text(["crontab", USER, "--target-template", "{not json"])
    assert code == 2 and "--target-template: not valid JSON" in text


def test_text_output_lists_runs_and_problems_with_lines() -> None:
    code, text = run_text(["crontab", USER, "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 4
    assert "9 definitions would create:" in text and "9 problems:" in text
    assert "(s)" not in text
    assert "runs      2026-03-27T01:30:00Z, 2026-03-28T01:30:00Z, 2026-03-29T01:00:00Z" in text
    assert f"{USER}:18: @reboot" in text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the live server reads committed rows
def test_apply_creates_schedules_whose_server_preview_matches(server: WebServer) -> None:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    _, token = tenant_services.token_issue(tenant=tenant, name="ci", role=Role.OPERATOR)
    with Client(server.url, token) as client:
        argv = ["crontab", USER, "--target-template", TEMPLATE, "--apply", *AFTER_ARG]
        code, doc, _ = run_import(argv, client)
        assert code == 4
        applied = doc["applied"]
        assert applied["summary"] == {"create": 9, "update": 0, "unchanged": 0, "delete": 0}
        previews = server_previews(client, applied, "2026-03-27T00:00:00Z")
        assert previews == {d["name"]: d["next_runs"] for d in doc["definitions"]}
        for d in doc["definitions"]:
            s = Schedule.objects.get(tenant=tenant, name=d["name"], deleted_at__isnull=True)
            assert (s.cron, s.timezone, s.target["body"]) == (
                d["cron"], d["timezone"], d["target"]["body"],
            )  # fmt: skip
        # Importing again changes nothing: apply is keyed by name.
        code, again, _ = run_import(argv, client)
        assert again["applied"]["summary"]["unchanged"] == 9


def test_zone_lines_and_system_macros(tmp_path: Any) -> None:
    path = tmp_path / "app.cron"
    path.write_text(
        "TZ=Asia/Tokyo\n"
        "@hourly   deploy  /opt/app/bin/tick\n"
        "CRON_TZ=Mars/Olympus_Mons\n"
        "0 8 * * * deploy  /opt/app/bin/morning\n"
        "@reboot   root    /opt/app/bin/warm\n"
    )
    code, doc, _ = run_import(
        ["crontab", "--system", str(path), "--target-template", TEMPLATE, *AFTER_ARG]
    )
    assert code == 4
    assert [(d["name"], d["cron"], d["timezone"]) for d in doc["definitions"]] == [
        ("tick", "@hourly", "Asia/Tokyo"),
        ("morning", "0 8 * * *", "Asia/Tokyo"),  # the unknown zone is refused, Tokyo stays
    ]
    problems = by_line(doc["problems"])
    assert "used as the schedule zone" in problems[1]
    assert (
        problems[3].startswith("CRON_TZ: ") and "the following lines keep Asia/Tokyo" in problems[3]
    )
    assert "@reboot is not supported" in problems[5]
    for d in doc["definitions"]:
        assert d["next_runs"] == platform_runs(d["cron"], d["timezone"], AFTER)


def test_names_say_what_runs_not_how_the_shell_runs_it(tmp_path: Any) -> None:
    """A name from the command's program (a script's name without its extension, an
    interpreter's script, a wrapped command) and its first arguments; redirections,
    pipes, `cd … &&`, `sh -c`, options and variables are not in it (issue 35, defect 22:
    `/opt/report.sh > /dev/null 2>&1` was named `report-sh-dev-null-2-1`). A suffix
    only when two lines would have the same name."""
    path = tmp_path / "crontab"
    path.write_text(
        "0 1 * * * /opt/report.sh > /dev/null 2>&1\n"
        "0 2 * * * /opt/report.sh >/dev/null 2>&1\n"
        "0 3 * * * cd /srv/app && /usr/bin/python3 manage.py clearsessions >> /var/log/app.log 2>&1\n"
        "0 4 * * * /bin/sh -c '/opt/jobs/cleanup.sh --all > /dev/null'\n"
        "0 5 * * * flock -n /tmp/backup.lock nice -n 10 /opt/bin/backup.sh --full\n"
        "0 6 * * * LANG=C /usr/bin/php /var/www/cron.php\n"
        "0 7 * * * test -x /usr/sbin/anacron || run-parts --report /etc/cron.daily\n"
        "0 8 * * * /usr/local/bin/send-report weekly | mail -s report ops@example.com\n"
    )
    code, doc, _ = run_import(["crontab", str(path), "--target-template", TEMPLATE, *AFTER_ARG])
    assert code == 0, doc["problems"]
    assert [d["name"] for d in doc["definitions"]] == [
        "report",
        "report-2",
        "manage-clearsessions",
        "cleanup",
        "backup",
        "cron",
        "run-parts-cron-daily",
        "send-report-weekly",
    ]
    # The command itself is passed on whole, noise and all.
    assert doc["definitions"][0]["target"]["body"] == "/opt/report.sh > /dev/null 2>&1"


def test_counts_are_in_the_right_number(tmp_path: Any) -> None:
    path = tmp_path / "crontab"
    path.write_text("0 1 * * * /opt/report.sh\n@reboot /opt/warm\n")
    out = tmp_path / "schedules.yaml"
    code, text = run_text(
        ["crontab", str(path), "--target-template", TEMPLATE, "-o", str(out), *AFTER_ARG]
    )
    assert code == 4
    assert text.startswith("1 definition would create:\n")
    assert "\n1 problem:\n" in text
    assert f"wrote 1 definition to {out}" in text
    assert "(s)" not in text
