"""docs/reference/configuration.md lists exactly the environment variables the platform reads.

The page is written by hand (each variable's meaning needs words), so this test
is what keeps it true: it reads the platform's code for the variable names it
reads from the environment and fails naming each one the page is missing, and
each one the page lists that nothing reads any more.

Read in the code, without running it:
- `config.env` calls (`get`, `get_int`, `get_bool`, `get_list`) with a literal name;
- `os.environ.get("X")`, `os.environ["X"]`, `os.environ.setdefault("X", …)`, `os.getenv("X")`;
- `env.get("X")` / `env["X"]` on a copy of the environment named `env` (`make run`);
- `${X…}` in the compose services' shell scripts.
Names built at run time (`NAME_FILE`, `SCHED_SECRET_<TENANT>__<NAME>`) are
conventions the page describes in prose; they are not listed variables.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
# The platform's code: every process (web, beat, workers, make run) runs from these.
PACKAGES = ("config", "core", "tenants", "dispatch", "console")
SCRIPTS = ROOT / "compose" / "scripts"
ENV_FUNCTIONS = {"get", "get_int", "get_bool", "get_list"}
NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# A table row's first cell: one or more `NAME`s.
ROW = re.compile(r"^\|\s*(`[^|]*`)\s*\|")


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    return None


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _is_env_copy(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "env"


def _reads_environment(func: ast.AST, env_imports: set[str]) -> bool:
    """Whether a call to `func` reads the environment variable named by its first argument."""
    if isinstance(func, ast.Name):
        return func.id in env_imports
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    return (
        (func.attr in ("get", "setdefault") and _is_os_environ(receiver))
        or (func.attr == "get" and _is_env_copy(receiver))
        or (func.attr == "getenv" and isinstance(receiver, ast.Name) and receiver.id == "os")
    )


def names_read_by_python(source: str) -> set[str]:
    tree = ast.parse(source)
    env_imports = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "config.env"
        for alias in node.names
        if alias.name in ENV_FUNCTIONS
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args and _reads_environment(node.func, env_imports):
            name = _literal(node.args[0])
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and (_is_os_environ(node.value) or _is_env_copy(node.value))
        ):
            name = _literal(node.slice)
        if name:
            found.add(name)
    return found


def names_read_by_scripts(text: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))


def code_names() -> dict[str, set[str]]:
    """Each variable the platform reads → the files that read it."""
    where: dict[str, set[str]] = {}
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    files = [path for path in files if "migrations" not in path.parts]
    files.append(ROOT / "manage.py")
    for path in files:
        for name in names_read_by_python(path.read_text()):
            where.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    for path in sorted(SCRIPTS.glob("*.sh")):
        for name in names_read_by_scripts(path.read_text()):
            where.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return where


def documented_names(text: str) -> set[str]:
    """The variables the page's tables list (the first cell of each row)."""
    names: set[str] = set()
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            names.update(n for n in re.findall(r"`([^`]+)`", match[1]) if NAME.match(n))
    return names


def test_the_scan_sees_each_way_of_reading():
    # The readers above, on one sample each: a scan that silently found nothing
    # would make the comparison below pass vacuously.
    source = (
        "import os\nfrom config.env import get, get_int as gi\n"
        "a = get('A_NAME'); b = gi('B_NAME', 1); c = os.environ.get('C_NAME')\n"
        "d = os.environ['D_NAME']; os.environ.setdefault('E_NAME', 'x')\n"
        "env = dict(os.environ); f = env.get('F_NAME'); g = env['G_NAME']\n"
        "h = os.getenv('H_NAME'); env['NOT_READ'] = '1'; os.environ['NOT_READ_2'] = '1'\n"
        "lower = os.environ.get('lowercase'); other = {}.get('NOT_ENV')\n"
    )
    assert names_read_by_python(source) == {f"{c}_NAME" for c in "ABCDEFGH"}
    assert names_read_by_scripts('exec x --n "${WEB_CONCURRENCY:-4}" $HOME') == {"WEB_CONCURRENCY"}
    assert documented_names("| `X_A`, `X_B` | `1` | `NOT_ME` |\n| --- |\n") == {"X_A", "X_B"}


def test_every_variable_read_is_documented_and_every_documented_one_is_read():
    where = code_names()
    assert len(where) > 50, "the scan found too few variables to be reading the code"
    documented = documented_names(PAGE.read_text())
    missing = sorted(set(where) - documented)
    stale = sorted(documented - set(where))
    problems = [
        f"{name} is read by {', '.join(sorted(where[name]))} but not listed in {PAGE.relative_to(ROOT)}"
        for name in missing
    ] + [
        f"{name} is listed in {PAGE.relative_to(ROOT)} but nothing in the platform reads it"
        for name in stale
    ]
    assert not problems, "\n".join(problems)
