"""The suite's accounting (tests/tiers.py): a test id maps to the (classname, name)
pytest writes in its JUnit report, and the accounting names every id that is missing,
reported twice, reported without being collected, or skipped without a reason."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests import tiers


@pytest.mark.parametrize(
    ("node_id", "key"),
    [
        ("tests/unit/test_a.py::test_b", ("tests.unit.test_a", "test_b")),
        ("tests/unit/test_a.py::TestC::test_d", ("tests.unit.test_a.TestC", "test_d")),
        (
            "tests/unit/test_netguard.py::test_denied[::ffff:127.0.0.1]",
            ("tests.unit.test_netguard", "test_denied[::ffff:127.0.0.1]"),
        ),
        (
            "tests/api/test_x.py::test_bad[sources0-sources[0].country-unknown country]",
            ("tests.api.test_x", "test_bad[sources0-sources[0].country-unknown country]"),
        ),
    ],
)
def test_a_test_id_maps_to_its_junit_key(node_id: str, key: tuple[str, str]) -> None:
    assert tiers.junit_key(node_id) == key


def report(tmp_path: Path, name: str, cases: str) -> tiers.Report:
    path = tmp_path / f"{name}.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return tiers.read_report(name, path)


def test_the_accounting_names_every_id_out_of_place(tmp_path: Path) -> None:
    ids = [
        "tests/unit/test_a.py::test_ok",
        "tests/unit/test_a.py::test_twice",
        "tests/unit/test_a.py::test_dropped",
        "tests/unit/test_a.py::test_skipped",
        "tests/unit/test_a.py::test_xfail[::1]",
    ]
    main = report(
        tmp_path,
        "main",
        '<testcase classname="tests.unit.test_a" name="test_ok"/>'
        '<testcase classname="tests.unit.test_a" name="test_twice"/>'
        '<testcase classname="tests.unit.test_a" name="test_skipped">'
        '<skipped type="pytest.skip" message=""/></testcase>'
        '<testcase classname="tests.unit.test_a" name="test_xfail[::1]">'
        '<skipped type="pytest.xfail" message="known"/></testcase>',
    )
    system = report(
        tmp_path,
        "system",
        '<testcase classname="tests.unit.test_a" name="test_twice">'
        '<failure message="boom"/></testcase>'
        '<testcase classname="tests.unit.test_a" name="test_stray"/>',
    )
    assert main.outcomes == Counter({"passed": 2, "skipped": 1, "xfailed": 1})
    assert system.outcomes == Counter({"failed": 1, "passed": 1})
    assert tiers.account(ids, [main, system]) == [
        "not run or not reported: tests/unit/test_a.py::test_dropped",
        "reported 2 times: tests/unit/test_a.py::test_twice",
        "reported but not collected: tests.unit.test_a::test_stray",
        "skipped without a reason: tests.unit.test_a.test_skipped",
    ]


def test_a_run_with_every_id_once_has_nothing_to_say(tmp_path: Path) -> None:
    ids = ["tests/unit/test_a.py::test_ok", "tests/unit/test_a.py::TestB::test_c[x y]"]
    main = report(
        tmp_path,
        "main",
        '<testcase classname="tests.unit.test_a" name="test_ok"/>'
        '<testcase classname="tests.unit.test_a.TestB" name="test_c[x y]"/>',
    )
    assert tiers.account(ids, [main]) == []
