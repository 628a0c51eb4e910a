"""reference/benchmarks.md: the figures of a `manage.py bench all` run, from its JSON file.

The page shows docs/benchmarks/bench-results.json when the repository has one:
the machine and the date it records (bench.common.machine), and the summary
table `bench all` prints (each figure next to its raw ceiling), formatted by the
bench's own `fmt`. Without the file the page says so and how to make one: no
figure on it is ever typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reference_pages.markdown import GENERATED_NOTE, code, inline, table

RESULTS = Path("benchmarks") / "bench-results.json"  # under docs/

HOW = (
    "To publish figures: run `make bench` (every bench at the sizes the Makefile's `BENCH_*` "
    "variables give, on servers of its own; it takes a long while and loads the machine), "
    f"copy the `bench-results.json` it writes to `docs/{RESULTS.as_posix()}`, commit it, and "
    "build the docs again. `python manage.py bench --help` lists every bench and its sizes.\n"
)


def _machine_sentence(machine: dict[str, Any] | None) -> str:
    if not machine:
        return (
            "The file does not say on which machine or when it was measured (it was written "
            "before the bench recorded them), so these figures are published without them.\n"
        )
    return (
        f"Measured on {machine.get('cpus')} CPUs and {machine.get('memory_gib')} GiB of memory "
        f"({inline(machine.get('platform'))}; Python {machine.get('python')}, PostgreSQL "
        f"{inline(machine.get('postgresql'))}, {machine.get('broker')} broker); the last bench "
        f"finished at {machine.get('recorded_at')}.\n"
    )


def render(docs: Path) -> str:
    out = [GENERATED_NOTE, "# Benchmarks\n"]
    path = docs / RESULTS
    if not path.exists():
        out += [
            "No benchmark results are published with this version of the docs: the "
            f"repository has no `docs/{RESULTS.as_posix()}`.\n",
            HOW,
        ]
        return "\n".join(out)

    from bench.common import MACHINE_KEY, fmt
    from bench.suite import SUMMARY_KEYS

    data = json.loads(path.read_text())
    summary = data.get("summary")
    if not isinstance(summary, dict) or not summary.get("rows"):
        raise ValueError(f"{path} has no summary rows: write it with `manage.py bench all`")
    rows = [[inline(fmt(row.get(key))) for key in SUMMARY_KEYS] for row in summary["rows"]]
    out += [
        "The figures of one `manage.py bench all` run, from "
        f"{{download}}`bench-results.json <../{RESULTS.as_posix()}>` (every bench's full "
        "figures are in that file). Each figure stands next to its raw ceiling on the same "
        "machine where it has one: ratio = value / ceiling.\n",
        _machine_sentence(data.get(MACHINE_KEY)),
        table(SUMMARY_KEYS, rows),
    ]
    if summary.get("failed"):
        out.append(
            "Benches that failed in this run: "
            + ", ".join(code(name) for name in summary["failed"])
            + ".\n"
        )
    out.append(HOW)
    return "\n".join(out)
