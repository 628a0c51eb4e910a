"""Running `schedctl import …` in-process for the import tests: the CLI's own parser
and handler with a Context whose client (when --apply is used) talks to the real
Django application over httpx's WSGI transport — the whole HTTP stack, no server
process, on the test's database transaction."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "integration" / "client" / "samples"
# The client is its own distribution (clients/python); the shared venv does not
# install it, so the tests import it from the source tree.
if str(ROOT / "clients" / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "clients" / "python"))

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


def wsgi_client(token: str) -> Client:
    import httpx

    from config.wsgi import application

    return Client("http://testserver", token, transport=httpx.WSGITransport(app=application))
