"""The lock files: write them (`make lock`), check them against pyproject.toml
(`make lock-check`, `make install`, the unit tests) and compare an installed
environment with them (`make install`'s last step).

Stdlib only (Python 3.11+: tomllib), so `check` runs before any venv exists.
`compile` drives uv's `pip compile`: a universal resolution (one lock for every
platform and Python >= requires-python, the differences as markers) with the
hash of every file, installed by plain pip in hash-checking mode.

Each lock file carries, in its header, the SHA-256 of the inputs it was
resolved from (the dependency lists of its pyproject, not the rest of the file),
so the agreement check is a hash comparison: no network, no resolver, no time.
A new lock (the client's, say) is one more entry in LOCKS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

DIGEST_PREFIX = "# inputs-sha256: "
# Installed from the lock as well, so nothing pip fetches is unpinned: pip
# itself, and the build backend `pip install --no-build-isolation .` uses.
EXTRA_INPUTS = ("pip",)


@dataclass(frozen=True)
class Lock:
    output: str  # the lock file, relative to the repository root
    project: str  # the pyproject.toml it locks
    extras: tuple[str, ...] = ()
    # Resolved within this other lock, so the shared pins are the same versions.
    within: str | None = None


LOCKS = (
    # First: the superset. `make install` (developers, CI) installs it.
    Lock("requirements/platform-dev.txt", "pyproject.toml", extras=("dev",)),
    # The platform alone (a production image), the same versions as above.
    Lock("requirements/platform.txt", "pyproject.toml", within="requirements/platform-dev.txt"),
    # The Python client and schedctl (clients/python), the same versions as the platform's.
    Lock(
        "requirements/client.txt",
        "clients/python/pyproject.toml",
        extras=("celery-beat",),
        within="requirements/platform-dev.txt",
    ),
)

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _squash(requirement: str) -> str:
    # Whitespace is not meaning: "a >= 1" and "a>=1" lock the same.
    return re.sub(r"\s+", "", requirement)


def inputs_digest(pyproject: Path) -> str:
    """SHA-256 of everything in pyproject.toml that a resolution depends on."""
    data = tomllib.loads(pyproject.read_text())
    project = data.get("project", {})
    inputs = {
        "requires-python": _squash(project.get("requires-python", "")),
        "dependencies": sorted(_squash(r) for r in project.get("dependencies", [])),
        "optional-dependencies": {
            extra: sorted(_squash(r) for r in requirements)
            for extra, requirements in project.get("optional-dependencies", {}).items()
        },
        "build-system": sorted(
            _squash(r) for r in data.get("build-system", {}).get("requires", [])
        ),
        "extra-inputs": list(EXTRA_INPUTS),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock_file: Path) -> str | None:
    for line in lock_file.read_text().splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line.removeprefix(DIGEST_PREFIX).strip()
        if line and not line.startswith("#"):
            break  # the header is over
    return None


def pins(lock_file: Path) -> dict[str, tuple[str, str | None]]:
    """{canonical name: (version, marker or None)} of a lock file."""
    found: dict[str, tuple[str, str | None]] = {}
    for line in lock_file.read_text().splitlines():
        match = PIN.match(line)
        if match:
            found[_canonical(match[1])] = (match[2], match[3])
    return found


def check(root: Path) -> list[str]:
    """What disagrees between the pyprojects and the locks; empty when all agree."""
    problems = []
    for lock in LOCKS:
        lock_file = root / lock.output
        if not lock_file.exists():
            problems.append(f"{lock.output} is missing")
            continue
        recorded = recorded_digest(lock_file)
        if recorded != inputs_digest(root / lock.project):
            problems.append(
                f"{lock.output} was not locked from the dependencies {lock.project} lists now"
                + ("" if recorded else f" (its header has no {DIGEST_PREFIX.strip('# :')} line)")
            )
        if lock.within and (root / lock.within).exists():
            outer = pins(root / lock.within)
            for name, (version, _marker) in sorted(pins(lock_file).items()):
                other = outer[name][0] if name in outer else "nothing"
                if other != version:
                    problems.append(
                        f"{lock.output} pins {name}=={version}, {lock.within} pins {other}"
                    )
    return problems


def _header(lock: Lock, digest: str) -> str:
    extras = f" with the extras [{','.join(lock.extras)}]" if lock.extras else ""
    within = (
        f"\n# Resolved within {lock.within}, so the versions it shares are the same."
        if lock.within
        else ""
    )
    return (
        f"# Locked by `make lock` from {lock.project}{extras}, its build-system requires and pip.\n"
        "# Do not edit: change pyproject.toml and run `make lock` (`make lock LOCK_ARGS=--upgrade`\n"
        '# moves everything to the newest versions, LOCK_ARGS="--upgrade-package NAME" one).\n'
        "# Universal: installs on every platform and Python the project supports, the\n"
        f"# pins after ';' only where their marker holds. Hash-checked by pip.{within}\n"
        f"{DIGEST_PREFIX}{digest}\n"
    )


def compile_locks(root: Path, uv: str, uv_args: list[str]) -> None:
    for lock in LOCKS:
        project = root / lock.project
        data = tomllib.loads(project.read_text())
        # Build requires and pip go in on stdin: they are not the project's
        # dependencies but are installed from the lock all the same.
        extra = "\n".join([*data.get("build-system", {}).get("requires", []), *EXTRA_INPUTS])
        python = re.search(r"\d+\.\d+", data["project"].get("requires-python", ">=3.11"))
        command = [
            uv, "pip", "compile", lock.project, "-",
            "--universal", "--generate-hashes", "--no-header", "--quiet",
            "--python-version", python[0] if python else "3.11",
            "--default-index", "https://pypi.org/simple",
            "--output-file", lock.output,
            *(arg for extra_name in lock.extras for arg in ("--extra", extra_name)),
            *(("--constraint", lock.within) if lock.within else ()),
            *uv_args,
        ]  # fmt: skip
        # Only PyPI: a machine's own uv configuration never leaks into the lock.
        env = {key: value for key, value in os.environ.items() if not key.startswith("UV_")}
        env["UV_NO_CONFIG"] = "1"
        subprocess.run(command, cwd=root, input=extra, text=True, check=True, env=env)  # noqa: S603
        lock_file = root / lock.output
        lock_file.write_text(_header(lock, inputs_digest(project)) + lock_file.read_text())
        print(f"locked {lock.output}: {len(pins(lock_file))} pins")


def _marker_holds(marker: str | None) -> bool:
    if not marker:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:  # a venv without packaging still has pip's copy
        from pip._vendor.packaging.markers import Marker  # type: ignore[assignment]
    return bool(Marker(marker).evaluate())


def verify_env(root: Path, lock_file: Path) -> tuple[list[str], list[str]]:
    """(differences, extras) between this interpreter's packages and a lock."""
    from importlib import metadata

    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wanted = {name: v for name, (v, marker) in pins(lock_file).items() if _marker_holds(marker)}
    differences = [
        f"{name}: locked {version}, installed {installed.get(name, 'nothing')}"
        for name, version in sorted(wanted.items())
        if installed.get(name) != version
    ]
    project_names = set()
    for lock in LOCKS:
        project = tomllib.loads((root / lock.project).read_text())["project"]
        project_names.add(_canonical(project["name"]))
    extras = sorted(set(installed) - set(wanted) - project_names)
    return differences, extras


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="fail when a lock was not made from its pyproject as it is")
    compile_parser = commands.add_parser("compile", help="write every lock (make lock)")
    compile_parser.add_argument("--uv", default="uv")
    verify = commands.add_parser(
        "verify-env", help="compare this interpreter's packages with a lock"
    )
    verify.add_argument("lock_file", type=Path)
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "compile":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    if args.command == "check":
        problems = check(args.root)
        for problem in problems:
            print(f"lock check: {problem}", file=sys.stderr)
        if problems:
            print("lock check: run `make lock` and commit the lock files", file=sys.stderr)
            return 1
        return 0
    if args.command == "compile":
        compile_locks(args.root, args.uv, rest)
        return 0
    differences, extras = verify_env(args.root, args.lock_file)
    for line in differences:
        print(f"not as locked: {line}", file=sys.stderr)
    if extras:
        print(f"installed but not in {args.lock_file}: {', '.join(extras)}", file=sys.stderr)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
