"""One migrated database that every test database of a run is cloned from.

pytest-django creates each test database (test_<name>, or test_<name>_gwN on xdist
worker N) by running every migration into an empty database: about 10 s each, and
the main tier's workers do it at once on two cores. `python -m tests.tiers` migrates
one template instead (`build`), before the tiers start, and names it in
SUITE_DB_TEMPLATE; tests/conftest.py (`django_db_modify_db_settings`)
makes Django create each test database WITH TEMPLATE it (a file copy, a fraction of a
second). Django's migrate still runs on the copy and finds nothing to apply, so a
test database is exactly what the migrations make; a run without SUITE_DB_TEMPLATE
(a developer's `pytest FILE`) migrates as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = "SUITE_DB_TEMPLATE"


def template_name(url: str) -> str:
    """The template's name beside the test databases pytest-django derives from `url`."""
    return f"test_{urlsplit(url).path.lstrip('/')}_template"


def build(url: str) -> str:
    """Create (anew) and migrate the template of the database `url` names; its name."""
    name = template_name(url)
    parts = urlsplit(url)
    maintenance = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        # FORCE: a template left connected by an interrupted run must not block the next.
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = os.environ | {"DATABASE_URL": urlunsplit(parts._replace(path=f"/{name}"))}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return name
