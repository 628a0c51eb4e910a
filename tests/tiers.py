"""The whole suite as `make test` runs it: two tiers, then the accounting.

* **main** — unit and integration tests (everything not marked `system`), spread
  over pytest-xdist workers (`--dist worksteal`; `--max-worker-restart=0`, so a
  worker that dies names its test instead of being replaced). Each worker has its
  own PostgreSQL database (pytest-django's test_<name>_gwN) and its own Redis
  databases (tests/support/xdist_slots.py); the beats and workers a test starts
  inherit them.
* **system** — the tests marked `system` (they restart PostgreSQL, bind fixed
  ports, share the one RabbitMQ, measure timing or run many processes for minutes:
  the chaos suite, bench smokes, DST time travel, schemathesis, `make run` in
  Chromium, the embedded servers, a real `pip install`), one at a time, after it.
* **accounting** — every test id the collection found appears exactly once across
  the two tiers' JUnit reports, as passed, failed, skipped (with its reason) or
  xfailed; anything else (a test neither run nor reported, or reported twice) fails
  the run. A parallel suite that silently drops tests is worse than a slow one.

    python -m tests.tiers                 # both tiers, then the accounting
    python -m tests.tiers main -k calendar  # one tier, with pytest's own arguments
    SUITE_WORKERS=2 python -m tests.tiers   # the main tier's worker count (default 3)

The JUnit reports, the collected ids and the accounting's findings are written to
test-artifacts/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import dbtemplate

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
WORKERS = int(os.environ.get("SUITE_WORKERS", "3"))


@dataclass(frozen=True)
class Tier:
    name: str
    marks: str
    options: tuple[str, ...]


TIERS = (
    Tier(
        "main",
        "not system",
        (
            "-p",
            "tests.support.xdist_slots",
            "-n",
            str(WORKERS),
            "--dist",
            "worksteal",
            "--max-worker-restart=0",
        ),
    ),
    Tier("system", "system", ("-p", "no:xdist")),
)


def pytest(*args: str) -> int:
    # `python -m pytest` from the root: the root is on sys.path before pytest parses its
    # `-p` plugins (tests.support.xdist_slots must rewrite the URLs before the settings load).
    return subprocess.call([sys.executable, "-m", "pytest", *args], cwd=ROOT)


def junit_key(node_id: str) -> tuple[str, str]:
    """(classname, name) of a test id in pytest's JUnit report: the path's parts
    without `.py` and any classes, joined by dots; the last part of the id is the name,
    its parameters kept whole (they may hold "::", an IPv6 address, or spaces)."""
    base, bracket, params = node_id.partition("[")
    path, *names = base.split("::")
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts + names[:-1]), names[-1] + bracket + params


COLLECT = (sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist")
COLLECT += ("-p", "no:warnings")  # its summary would repeat test ids


def collected(args: list[str]) -> list[str]:
    out = subprocess.run(
        [*COLLECT, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    # One id a line (a parametrized id may hold spaces); the summary line has no "::".
    ids = [line for line in out.stdout.splitlines() if line.startswith("tests/") and "::" in line]
    if out.returncode != 0 or not ids:
        sys.stdout.write(out.stdout[-5000:] + out.stderr[-5000:])
        raise SystemExit(f"collection failed (exit {out.returncode})")
    return ids


@dataclass
class Report:
    tier: str
    outcomes: Counter[str] = field(default_factory=Counter)
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    unexplained_skips: list[str] = field(default_factory=list)


def read_report(tier: str, path: Path) -> Report:
    report = Report(tier)
    if not path.exists():
        return report
    # The report pytest just wrote for this run, not outside input.
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314
        key = (case.get("classname", ""), case.get("name", ""))
        report.seen[key] += 1
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif skipped is not None:
            outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
            if outcome == "skipped" and not (skipped.get("message") or "").strip():
                report.unexplained_skips.append(".".join(key))
        else:
            outcome = "passed"
        report.outcomes[outcome] += 1
    return report


def account(ids: list[str], reports: list[Report]) -> list[str]:
    """What is wrong with the run's bookkeeping (empty: every id exactly once)."""
    wanted = Counter(junit_key(i) for i in ids)
    seen: Counter[tuple[str, str]] = Counter()
    for report in reports:
        seen.update(report.seen)
    problems = []
    missing = sorted(k for k in wanted if seen[k] < wanted[k])
    twice = sorted(k for k in seen if seen[k] > wanted.get(k, 0) and k in wanted)
    stray = sorted(k for k in seen if k not in wanted)
    by_key = {junit_key(i): i for i in ids}
    problems += [f"not run or not reported: {by_key[k]}" for k in missing]
    problems += [f"reported {seen[k]} times: {by_key[k]}" for k in twice]
    problems += [f"reported but not collected: {'::'.join(k)}" for k in stray]
    for report in reports:
        problems += [f"skipped without a reason: {k}" for k in report.unexplained_skips]
    return problems


def main(argv: list[str]) -> int:
    which = argv[0] if argv and argv[0] in ("all", "main", "system") else "all"
    args = argv[1:] if argv and argv[0] == which else argv
    tiers = [t for t in TIERS if which in ("all", t.name)]
    ARTIFACTS.mkdir(exist_ok=True)
    ids = collected(["-m", " or ".join(f"({t.marks})" for t in tiers), *args])
    (ARTIFACTS / "collected.txt").write_text("\n".join(ids) + "\n")
    codes: dict[str, int] = {}
    took: dict[str, float] = {}
    if os.environ.get("DATABASE_URL") and dbtemplate.VARIABLE not in os.environ:
        started = time.monotonic()
        os.environ[dbtemplate.VARIABLE] = dbtemplate.build(os.environ["DATABASE_URL"])
        print(
            f"===== template database {os.environ[dbtemplate.VARIABLE]} migrated in "
            f"{time.monotonic() - started:.0f} s (every test database is cloned from it)",
            flush=True,
        )
    for tier in tiers:
        xml = ARTIFACTS / f"junit-{tier.name}.xml"
        xml.unlink(missing_ok=True)
        print(
            f"\n===== tier {tier.name}: pytest -m '{tier.marks}' {' '.join(tier.options)}",
            flush=True,
        )
        started = time.monotonic()
        code = pytest("-m", tier.marks, *tier.options, f"--junitxml={xml}", *args)
        took[tier.name] = time.monotonic() - started
        # 5: the tier selected nothing (a -k that matched only the other tier's tests).
        codes[tier.name] = 0 if code == 5 else int(code)
    reports = [read_report(t.name, ARTIFACTS / f"junit-{t.name}.xml") for t in tiers]
    problems = account(ids, reports)
    (ARTIFACTS / "accounting.txt").write_text("\n".join(problems) + "\n")
    print("\n===== accounting")
    for report in reports:
        counts = ", ".join(f"{n} {o}" for o, n in sorted(report.outcomes.items()))
        print(f"tier {report.tier}: {counts or 'nothing'} in {took[report.tier]:.0f} s")
    print(f"collected {len(ids)}, reported {sum(sum(r.seen.values()) for r in reports)}")
    for problem in problems[:200]:
        print(f"  {problem}")
    if problems:
        print(
            f"accounting FAILED: {len(problems)} problem(s), all in test-artifacts/accounting.txt"
        )
    failed = sum(r.outcomes["failed"] for r in reports)
    passed = sum(r.outcomes["passed"] for r in reports)
    skipped = sum(r.outcomes["skipped"] for r in reports)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if problems or any(codes.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
