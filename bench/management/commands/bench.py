"""`python manage.py bench <which>`: benchmarks on this machine (code in bench/).

Run them on a database and broker of their own (`make bench` uses a separate
embedded data folder when no URLs are set): each creates a throwaway tenant,
starts real beats / workers / web servers as it needs, and removes its rows
and purges its queues when done. Every figure is merged into the JSON file
and printed next to its raw ceiling from `limits` (run that first).

    bench limits  --n 20000 --noop-n 5000
    bench burst   --n 10000 --beats 2
    bench cronburst --n 100000 --beats 2 --broker redis   (or amqp: RABBITMQ_URL)
    bench scaling --n 100000 --beats 1,2,4
    bench steady  --rates 1000,2000,5000 --seconds 60
    bench e2e     --n 2000 --workers 1 --concurrency 2
    bench scale   --small 10000 --large 1000000
    bench api     --schedules 2000 --rows 10000000
    bench runs    --rows 10000000 --schedules 2000
    bench flatten --n 10000 --jitter 30
    bench backfill --n 10000 --max-concurrent 100
    bench all     (all of them at moderate sizes, then one combined table)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import suite


def _rates(text: str) -> list[int]:
    try:
        rates = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("rates are whole numbers, e.g. 1000,2000,5000") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("give at least one positive rate")
    return rates


def _broker(text: str) -> str:
    if text not in {"redis", "amqp"}:
        raise argparse.ArgumentTypeError("redis or amqp")
    return text


def _yes(text: str) -> bool:
    if text.lower() in {"yes", "true", "1"}:
        return True
    if text.lower() in {"no", "false", "0"}:
        return False
    raise argparse.ArgumentTypeError("yes or no")


def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(names) - set(suite.ORDER))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown bench {unknown[0]!r}")
    return names


ALL_CRON_BROKER = "amqp" if os.environ.get("RABBITMQ_URL") else "redis"

# Per subcommand: (option, type, default for the subcommand, default inside `all`, help).
OPTIONS: dict[str, list[tuple[str, Any, Any, Any, str]]] = {
    "limits": [
        ("n", int, 20_000, 20_000, "due rows claimed and messages published"),
        ("noop-n", int, 5_000, 5_000, "no-op Celery tasks consumed"),
    ],
    "burst": [
        ("n", int, 10_000, 10_000, "one-offs due at the same second"),
        ("beats", int, 2, 2, "beat processes"),
        ("lead", float, 0, 0, "seconds between making them due and due time (0: 3 s)"),
    ],
    "cronburst": [
        ("n", int, 100_000, 100_000, "cron schedules due at one minute boundary"),
        ("beats", int, 2, 2, "beat processes"),
        # Inside `all`: the RabbitMQ variant when there is a RabbitMQ (scaling measures Redis).
        (
            "broker",
            _broker,
            "redis",
            ALL_CRON_BROKER,
            "redis or amqp (RabbitMQ, publisher confirms)",
        ),
        ("stage-ahead", float, 90.0, 60.0, "BEAT_STAGE_AHEAD_S for the beats; lead = this + 30 s"),
    ],
    "scaling": [
        ("n", int, 100_000, 100_000, "cron schedules due at one minute boundary, per run"),
        ("beats", _rates, [1, 2, 4], [1, 2, 4], "beat counts, one burst each"),
        ("broker", _broker, "redis", "redis", "redis or amqp"),
        # 60 s inside `all` (each run waits lead + up to a minute): four 100k bursts fit.
        ("stage-ahead", float, 90.0, 60.0, "BEAT_STAGE_AHEAD_S for the beats; lead = this + 30 s"),
    ],
    "steady": [
        ("rates", _rates, [1000, 2000, 5000], [1000, 2000, 5000], "due rates per second"),
        ("seconds", float, 60, 30, "seconds of due times per rate"),
        ("beats", int, 2, 2, "beat processes"),
        ("lead", float, None, None, "seconds from insert to the first due time (default: by size)"),
    ],
    "e2e": [
        ("n", int, 2000, 2000, "no-op HTTP executions"),
        ("workers", int, 1, 1, "worker processes"),
        ("concurrency", int, 2, 2, "prefork concurrency per worker"),
        ("overhead-n", int, 300, 300, "in-process runs measuring per-execution overhead"),
    ],
    "scale": [
        ("small", int, 10_000, 10_000, "idle schedules, small table"),
        ("large", int, 1_000_000, 1_000_000, "idle schedules, large table"),
        ("due", int, 20, 20, "schedules due in every cycle"),
        ("cycles", int, 30, 30, "measured beat cycles per size"),
        ("rss-seconds", float, 5, 5, "seconds a beat subprocess runs before its RSS is read"),
    ],
    "api": [
        ("schedules", int, 2000, 2000, "schedules created through POST /v1/schedules"),
        ("rows", int, 10_000_000, 1_000_000, "execution rows in the tenant's history"),
        ("clients", int, 4, 4, "concurrent API clients"),
        ("requests", int, 200, 200, "GETs per page depth"),
        ("web-workers", int, 2, 2, "gunicorn worker processes"),
    ],
    "runs": [
        ("rows", int, 10_000_000, 1_000_000, "execution rows over four tenants (70 %% measured)"),
        ("schedules", int, 2000, 2000, "schedules per tenant"),
        ("requests", int, 50, 30, "timed answers per filter"),
        ("keep", _yes, False, False, "yes: leave the rows for the next run to reuse"),
    ],
    "flatten": [
        ("n", int, 10_000, 10_000, "schedules due at the same minute"),
        ("jitter", int, 30, 30, "jitter_s of the spread variant"),
        ("beats", int, 2, 2, "beat processes"),
    ],
    "backfill": [
        ("n", int, 10_000, 10_000, "occurrences backfilled (BACKFILL_MAX_OCCURRENCES at most)"),
        ("max-concurrent", int, 100, 100, "the backfill's max_concurrent (1..100)"),
    ],
    "retention": [
        ("n", int, 1_000_000, 1_000_000, "executions in the expired day (two events each)"),
        ("baseline-s", float, 60, 60, "seconds of the firing probe with no retention running"),
    ],
}
HELP = {
    "limits": "raw ceilings (claim, Redis LPUSH, RabbitMQ confirms) and the beat's own figures",
    "burst": "N one-offs due at the same second, real beats and broker",
    "cronburst": "N cron schedules due at one minute boundary, created minutes before, real beats",
    "scaling": "the cron burst once per beat count (1,2,4): dispatch/s and its ratios",
    "steady": "fire lag under steady due rates, real beats",
    "e2e": "no-op HTTP executions end to end, real beat and workers; per-execution overhead",
    "scale": "beat cycle cost with a small vs a large idle schedule table; beat RSS",
    "api": "schedule creation rate and execution-list latency through a real web server",
    "runs": "the runs page's filtered execution list and capped total on a big table",
    "flatten": "top-of-the-minute burst without and with jitter spreading",
    "backfill": "a backfill's plan time and its create rate through the control pump (in-process)",
    "retention": "one expired day leaving: archive + detach + drop vs DELETE, under a firing probe",
}


def _dest(which: str, option: str) -> str:
    return f"{which}_{option.replace('-', '_')}"


class Command(BaseCommand):
    help = "Benchmarks: " + ", ".join(suite.ORDER) + ", all (see bench/)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="which", required=True)
        for which, options in OPTIONS.items():
            p = sub.add_parser(which, help=HELP[which])
            for option, kind, default, _, text in options:
                p.add_argument(f"--{option}", type=kind, default=default, help=text)
            p.add_argument("--json", default="bench-results.json")
        every = sub.add_parser(
            "all", help="limits first, then every other bench, then one combined table"
        )
        for which, options in OPTIONS.items():
            for option, kind, _, default, text in options:
                every.add_argument(
                    f"--{which}-{option}",
                    dest=_dest(which, option),
                    type=kind,
                    default=default,
                    help=f"{which}: {text}",
                )
        every.add_argument(
            "--skip", type=_names, default=[], help="comma-separated benches not to run"
        )
        every.add_argument("--json", default="bench-results.json")

    def handle(self, *args: Any, **opts: Any) -> None:
        path = Path(opts["json"])
        which = opts["which"]
        if which == "all":
            plan = [
                (
                    name,
                    {
                        option.replace("-", "_"): opts[_dest(name, option)]
                        for option, *_ in OPTIONS[name]
                    },
                )
                for name in suite.ORDER
                if name not in opts["skip"]
            ]
            failed = suite.run_all(plan, path, self.stdout.write)
            if failed:
                raise CommandError(f"bench all: {', '.join(failed)} failed (see above)")
            return
        bench_opts = {
            option.replace("-", "_"): opts[option.replace("-", "_")]
            for option, *_ in OPTIONS[which]
        }
        suite.run_one(which, bench_opts, path, self.stdout.write)
