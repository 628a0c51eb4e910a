"""django-celery-beat periodic tasks → schedule definitions.

From a `manage.py dumpdata django_celery_beat` JSON dump or, read-only, from the
database itself (PostgreSQL through psycopg: `pip install scheduler-client[celery-beat]`).
Crontab rows carry their own zone; interval rows become cron only when that is exact
on the clock (every 5 minutes → `*/5 * * * *`, every 2 hours → `0 */2 * * *`:
divisors of an hour or of a day); clocked and solar schedules, one-off tasks without
a start time, `expires` and a day of month AND a day of week together (celery
requires both, cron either) are Problems. Rows are identified by their primary key
(Problem.line).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scheduler_client.importers import (
    ImportResult,
    Problem,
    TemplateError,
    cron_problem,
    fill_template,
    unique_name,
)

__all__ = ["load_database", "load_dump", "parse_rows", "redact_url"]

TEMPLATE_REQUIRED = (
    "--target-template is required for celery-beat tasks: say how a task is sent, e.g. "
    '\'{"type": "queue", "exchange": "<tenant>.celery", "routing_key": "{queue}", '
    '"body": {"task": "{task}", "args": "{args}", "kwargs": "{kwargs}"}}\''
)
_PREFIX = "django_celery_beat."
# A task without a queue goes to Celery's default queue (task_default_queue).
DEFAULT_QUEUE = "celery"


def redact_url(url: str) -> str:
    """The URL without its password (Problems and output name the source)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def load_dump(text: str) -> dict[str, dict[int, dict[str, Any]]]:
    """`dumpdata` JSON → {model: {pk: fields}} for the models this importer reads."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("not a dumpdata file: expected a JSON list of objects")
    tables: dict[str, dict[int, dict[str, Any]]] = {}
    for obj in data:
        if not isinstance(obj, dict) or "model" not in obj or "fields" not in obj:
            raise ValueError("not a dumpdata file: each object needs 'model' and 'fields'")
        model = str(obj["model"])
        if model.startswith(_PREFIX):
            pk = obj.get("pk")
            if not isinstance(pk, int):
                raise ValueError(f"{model}: pk {pk!r} is not a number")
            tables.setdefault(model[len(_PREFIX) :], {})[pk] = dict(obj["fields"])
    return tables


_QUERIES = {
    "periodictask": "SELECT id, name, task, args, kwargs, queue, enabled, one_off, start_time, "
    "expires, expire_seconds, interval_id, crontab_id, solar_id, clocked_id "
    "FROM django_celery_beat_periodictask ORDER BY id",
    "crontabschedule": "SELECT id, minute, hour, day_of_week, day_of_month, month_of_year, "
    "timezone FROM django_celery_beat_crontabschedule",
    "intervalschedule": "SELECT id, every, period FROM django_celery_beat_intervalschedule",
}
_FK = {
    "interval_id": "interval",
    "crontab_id": "crontab",
    "solar_id": "solar",
    "clocked_id": "clocked",
}


def load_database(url: str) -> dict[str, dict[int, dict[str, Any]]]:
    """The same tables, read in one read-only transaction."""
    try:
        import psycopg
    except ImportError:
        raise ValueError(
            "reading a database needs psycopg: pip install 'scheduler-client[celery-beat]'"
        ) from None
    tables: dict[str, dict[int, dict[str, Any]]] = {}
    with psycopg.connect(url, autocommit=False) as conn:
        conn.read_only = True
        with conn.cursor() as cur:
            for model, sql in _QUERIES.items():
                cur.execute(sql)
                cols = [d.name for d in cur.description or []]
                rows = tables.setdefault(model, {})
                for values in cur.fetchall():
                    row = dict(zip(cols, values, strict=True))
                    pk = row.pop("id")
                    rows[pk] = {_FK.get(k, k): v for k, v in row.items()}
        conn.rollback()
    return tables


def _json_value(raw: Any, default: Any) -> Any:
    if raw is None or raw == "":
        return default
    if isinstance(raw, str):
        return json.loads(raw)
    return raw


def _iso(value: Any) -> str:
    if isinstance(value, datetime):  # the session's zone: UTC for the definition
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)


def interval_cron(every: int, period: str) -> str | None:
    """The exact cron equivalent of an interval, None when there is none."""
    minutes = {"minutes": every, "hours": every * 60, "seconds": every / 60}.get(period)
    if minutes is None or minutes != int(minutes) or minutes <= 0:
        return None
    minutes = int(minutes)
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if minutes % 60 == 0 and 24 % (minutes // 60) == 0 and minutes < 24 * 60:
        hours = minutes // 60
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    return None


def parse_rows(
    tables: dict[str, dict[int, dict[str, Any]]],
    *,
    source: str,
    timezone: str,
    template: dict[str, Any] | None,
) -> ImportResult:
    """Definitions for the periodic tasks; `timezone` is the zone of interval tasks."""
    if template is None:
        raise TemplateError(TEMPLATE_REQUIRED)
    result = ImportResult()
    names: set[str] = set()
    crontabs = tables.get("crontabschedule", {})
    intervals = tables.get("intervalschedule", {})
    for pk, task in sorted(tables.get("periodictask", {}).items(), key=lambda kv: kv[0]):
        label = f"{task.get('name')} ({task.get('task')})"

        def problem(reason: str, pk: int = pk, label: str = label) -> None:
            result.problems.append(Problem(source, pk, label, reason))

        definition: dict[str, Any] = {}
        if task.get("clocked") is not None:
            problem(
                "clocked schedules are not imported (a one-off at a clock time: create a "
                "job with run_at instead)"
            )
            continue
        if task.get("solar") is not None:
            problem("solar schedules (sunrise, sunset…) have no cron equivalent")
            continue
        if task.get("one_off"):
            if task.get("start_time") is None:
                problem("one_off task without a start_time: nothing to schedule")
                continue
            definition.update(run_at=_iso(task["start_time"]), timezone=timezone)
        elif task.get("crontab") is not None:
            row = crontabs.get(task["crontab"])
            if row is None:
                problem(f"crontab schedule {task['crontab']} is missing from the input")
                continue
            expr = " ".join(
                str(row[k])
                for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
            )
            zone = str(row.get("timezone") or "UTC")
            if row["day_of_month"].strip() != "*" and row["day_of_week"].strip() != "*":
                problem(
                    f"crontab {expr!r} restricts both day of month and day of week: "
                    "celery runs on days matching both, cron on days matching either"
                )
                continue
            reason = cron_problem(expr, zone)
            if reason:
                problem(f"crontab {expr!r} in {zone}: {reason}")
                continue
            definition.update(cron=expr, timezone=zone)
        elif task.get("interval") is not None:
            row = intervals.get(task["interval"])
            if row is None:
                problem(f"interval schedule {task['interval']} is missing from the input")
                continue
            every = interval_cron(int(row["every"]), str(row["period"]))
            if every is None:
                problem(
                    f"interval {row['every']} {row['period']} has no cron equivalent "
                    "(exact divisors of an hour or of a day only)"
                )
                continue
            definition.update(cron=every, timezone=timezone)
        else:
            problem("no schedule (interval, crontab, solar or clocked) is set")
            continue
        if task.get("start_time") is not None and not task.get("one_off"):
            problem(
                f"start_time {_iso(task['start_time'])} is not imported: the schedule "
                "starts when it is applied"
            )
        if task.get("expires") is not None or task.get("expire_seconds"):
            problem(
                "expires / expire_seconds is not imported: the platform's misfire "
                "policy decides what a late run does"
            )
        try:
            args = _json_value(task.get("args"), [])
            kwargs = _json_value(task.get("kwargs"), {})
        except json.JSONDecodeError as exc:
            problem(f"args/kwargs are not JSON: {exc.msg}")
            continue
        name = unique_name(str(task.get("name") or task.get("task")), names)
        values = {
            "name": name,
            "task": str(task.get("task") or ""),
            "args": args,
            "kwargs": kwargs,
            "queue": str(task.get("queue") or DEFAULT_QUEUE),
        }
        result.definitions.append(
            {
                "name": name,
                **definition,
                "target": fill_template(template, values),
                **({"paused": True} if task.get("enabled") is False else {}),
            }
        )
    return result
