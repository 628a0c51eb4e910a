"""Running `schedctl import …` in-process for the import tests: the CLI's own parser
and handler with a Context whose client (when --apply is used) talks to a live
gunicorn on the test database (client_support.live_server, one per module)."""

from __future__ import annotations

import io
import json
from datetime import datetime
from typing import Any

# client_support puts clients/python on sys.path (the client is not installed in the venv).
from tests.support import client_support  # noqa: F401
from tests.support.procs import ROOT

SAMPLES = ROOT / "tests" / "integration" / "client" / "samples"

from scheduler_client.cli import build_parser  # noqa: E402
from scheduler_client.cli.context import Context  # noqa: E402
from scheduler_client.client import Client  # noqa: E402

from dispatch.timing import cron  # noqa: E402


def run_import(argv: list[str], client: Client | None = None) -> tuple[int, dict[str, Any], str]:
    """(exit code, the --json document, stderr) of `schedctl import <argv> --json`."""
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["import", *argv, "--json"])
    ctx = Context(out=out, err=err, json=True, _client=client)
    code: int = args.handler(args, ctx)
    return code, json.loads(out.getvalue()), err.getvalue()


def run_text(argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout) of `schedctl import <argv>` through main()."""
    from scheduler_client.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["import", *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def platform_runs(expr: str, tz: str, after: datetime, count: int = 5) -> list[str]:
    """The server-side cron module's preview (what GET …/preview computes), ISO Z."""
    return [
        o.scheduled_for.isoformat().replace("+00:00", "Z")
        for o in cron.preview(expr, tz, seed="", after=after, count=count)
    ]


def server_previews(client: Client, applied: dict[str, Any], after: str) -> dict[str, list[str]]:
    """Each applied schedule's first 5 runs after `after`, from the live GET …/preview."""
    out = {}
    for change in applied["changes"]:
        body = client.request(
            "GET", f"/v1/schedules/{change['id']}/preview", params={"count": 5, "from": after}
        )
        out[change["name"]] = [o["scheduled_for"] for o in body["occurrences"]]
    return out
