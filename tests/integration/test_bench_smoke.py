"""The bench command keeps working (numbers are not asserted: timing goals live in `make bench`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import ROOT, child_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_limits_and_burst_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    for args in (["limits", "--n", "300"], ["burst", "--n", "300", "--beats", "1", "--lead", "2"]):
        res = subprocess.run(
            [sys.executable, "manage.py", "bench", *args, "--json", str(out)],
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["limits"]["pg_claim_rows_per_s"] > 0 and data["limits"]["broker_publish_per_s"] > 0
    burst = data["burst_300"]
    assert burst["lost"] == 0 and burst["duplicated"] == 0
    assert burst["lag_p99_s"] >= 0 and "ratio_to_ceiling" in burst
