"""Running one benchmark or all of them: results merged into the JSON file, tables printed."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    api,
    backfill,
    burst,
    cronburst,
    e2e,
    flatten,
    limits,
    retention,
    runs,
    scale,
    steady,
)
from bench.common import (
    MACHINE_KEY,
    dispatch_ceiling,
    load_results,
    machine,
    merge_result,
    publish_ceiling,
    ratio,
    table,
)

Opts = dict[str, Any]


@dataclass(frozen=True)
class Bench:
    key: Callable[[Opts], str]
    run: Callable[[Opts], dict[str, Any]]
    report: Callable[[dict[str, Any], dict[str, Any]], str]
    summary: Callable[[dict[str, Any], Opts], list[dict[str, Any]]]


def _steady_run(o: Opts) -> dict[str, Any]:
    return steady.run(o["rates"], o["seconds"], o["beats"], o["lead"])


BENCHES: dict[str, Bench] = {
    "limits": Bench(
        key=lambda o: limits.KEY,
        run=lambda o: limits.run(o["n"], o["noop_n"]),
        report=limits.report,
        summary=lambda d, o: limits.summary(d),
    ),
    "burst": Bench(
        key=lambda o: burst.key(o["n"]),
        run=lambda o: burst.run(o["n"], o["beats"], o["lead"]),
        report=burst.report,
        summary=lambda d, o: burst.summary(d, only=burst.key(o["n"])),
    ),
    "cronburst": Bench(
        key=lambda o: cronburst.key(o["n"], o["beats"], o["broker"]),
        run=lambda o: cronburst.run(o["n"], o["beats"], o["broker"], o["stage_ahead"]),
        report=cronburst.report,
        summary=lambda d, o: cronburst.summary(d, cronburst.key(o["n"], o["beats"], o["broker"])),
    ),
    "scaling": Bench(
        key=lambda o: cronburst.SCALING_KEY,
        run=lambda o: cronburst.run_scaling(o["n"], o["beats"], o["broker"], o["stage_ahead"]),
        report=cronburst.scaling_report,
        summary=lambda d, o: cronburst.scaling_summary(d),
    ),
    "steady": Bench(
        key=lambda o: steady.KEY,
        run=_steady_run,
        report=steady.report,
        summary=lambda d, o: steady.summary(d),
    ),
    "e2e": Bench(
        key=lambda o: e2e.KEY,
        run=lambda o: e2e.run(o["n"], o["workers"], o["concurrency"], o["overhead_n"]),
        report=e2e.report,
        summary=lambda d, o: e2e.summary(d),
    ),
    "scale": Bench(
        key=lambda o: scale.KEY,
        run=lambda o: scale.run(o["small"], o["large"], o["due"], o["cycles"], o["rss_seconds"]),
        report=scale.report,
        summary=lambda d, o: scale.summary(d),
    ),
    "api": Bench(
        key=lambda o: api.KEY,
        run=lambda o: api.run(
            o["schedules"], o["rows"], o["clients"], o["requests"], o["web_workers"]
        ),
        report=api.report,
        summary=lambda d, o: api.summary(d),
    ),
    "runs": Bench(
        key=lambda o: runs.KEY,
        run=lambda o: runs.run(o["rows"], o["schedules"], o["requests"], o["keep"]),
        report=runs.report,
        summary=lambda d, o: runs.summary(d),
    ),
    "flatten": Bench(
        key=lambda o: flatten.KEY,
        run=lambda o: flatten.run(o["n"], o["jitter"], o["beats"]),
        report=flatten.report,
        summary=lambda d, o: flatten.summary(d),
    ),
    "backfill": Bench(
        key=lambda o: backfill.KEY,
        run=lambda o: backfill.run(o["n"], o["max_concurrent"]),
        report=backfill.report,
        summary=lambda d, o: backfill.summary(d),
    ),
    "retention": Bench(
        key=lambda o: retention.KEY,
        run=lambda o: retention.run(o["n"], o["baseline_s"]),
        report=retention.report,
        summary=lambda d, o: retention.summary(d),
    ),
}
ORDER = (
    "limits",
    "burst",
    "cronburst",
    "scaling",
    "steady",
    "e2e",
    "scale",
    "api",
    "runs",
    "flatten",
    "backfill",
    "retention",
)
SUMMARY_KEYS = ["name", "figure", "value", "ceiling", "ratio"]


def _ratios(which: str, result: dict[str, Any], data: dict[str, Any]) -> None:
    """Each figure next to its raw ceiling, stored with the result."""
    ceiling = dispatch_ceiling(data)
    if which == "burst":
        burst.add_ratio(result, data)
    elif which == "cronburst":
        cronburst.add_ratio(result, data)
    elif which == "scaling":
        cronburst.add_scaling_ratios(result, data)
    elif which == "steady" and ceiling is not None:
        result["ratio_to_ceiling"] = ratio(result["sustained_rate_per_s"], ceiling)
    elif which == "flatten" and publish_ceiling(data) is not None:
        for variant in ("flat", "spread"):
            result[variant]["peak_ratio_to_ceiling"] = ratio(
                result[variant]["peak_published_per_s"], publish_ceiling(data)
            )


def run_one(which: str, opts: Opts, path: Path, write: Callable[[str], None]) -> dict[str, Any]:
    bench = BENCHES[which]
    result = bench.run(opts)
    _ratios(which, result, load_results(path))
    merge_result(path, MACHINE_KEY, machine())
    data = merge_result(path, bench.key(opts), result)
    write(bench.report(result, data))
    write(f"wrote {path}")
    return data


def run_all(plan: list[tuple[str, Opts]], path: Path, write: Callable[[str], None]) -> list[str]:
    """Run each (which, opts) in order; a failure is recorded and the rest still run."""
    failed: list[str] = []
    for which, opts in plan:
        write(f"\n== bench {which} {_describe(opts)}")
        started = time.monotonic()
        try:
            run_one(which, opts, path, write)
            write(f"(bench {which}: {time.monotonic() - started:.0f} s)")
        except Exception as exc:
            failed.append(which)
            write(f"bench {which} FAILED: {exc}\n{traceback.format_exc()}")
            merge_result(path, BENCHES[which].key(opts), {"error": f"{type(exc).__name__}: {exc}"})
    data = load_results(path)
    rows: list[dict[str, Any]] = []
    for which, opts in plan:
        rows.extend(BENCHES[which].summary(data, opts))
    for which in failed:
        rows.append(
            {
                "name": which,
                "figure": "FAILED",
                "value": data.get(BENCHES[which].key(dict(plan)[which]), {}).get("error"),
            }
        )
    merge_result(path, "summary", {"rows": rows, "failed": failed})
    write("\n== summary (ratio = value / ceiling)")
    write(table(rows, SUMMARY_KEYS))
    write(f"wrote {path}")
    return failed


def _describe(opts: Opts) -> str:
    def shown(v: Any) -> str:
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)

    return " ".join(f"--{k.replace('_', '-')} {shown(v)}" for k, v in opts.items() if v is not None)
