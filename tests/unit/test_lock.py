"""The lock files agree with pyproject.toml: the check `make install` and CI run
passes on the repository as committed and fails on a dependency added (or a
version moved) without `make lock`; every pin meets what pyproject asks."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "requirements" / "lock.py"
CLIENT = Path("clients") / "python"


def _lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lock = _lock_module()


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "check"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The pyproject and the locks, in a folder of the test's own to change."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    (tmp_path / CLIENT).mkdir(parents=True)
    shutil.copy(ROOT / CLIENT / "pyproject.toml", tmp_path / CLIENT / "pyproject.toml")
    return tmp_path


def test_the_committed_locks_agree_with_pyproject() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, result.stderr


def test_a_dependency_added_without_relocking_fails_the_check(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(
        text.replace("dependencies = [\n", 'dependencies = [\n    "attrs>=23",\n', 1)
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert "requirements/platform-dev.txt was not locked from the dependencies" in result.stderr
    assert "requirements/platform.txt was not locked from the dependencies" in result.stderr
    assert "run `make lock`" in result.stderr


def test_a_dev_extra_changed_without_relocking_fails_the_check(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"pytest>=8"', '"pytest>=8.1"', 1))
    assert run_check(copy).returncode == 1


def test_a_client_dependency_added_without_relocking_fails_the_check(copy: Path) -> None:
    pyproject = copy / CLIENT / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(
        text.replace("dependencies = [\n", 'dependencies = [\n    "attrs>=23",\n', 1)
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert (
        "requirements/client.txt was not locked from the dependencies clients/python/pyproject.toml"
        in result.stderr
    )
    # The platform's own locks are not affected by the client's inputs.
    assert "platform-dev.txt was not locked" not in result.stderr


def test_a_client_pin_that_left_the_dev_lock_fails_the_check(copy: Path) -> None:
    client = copy / "requirements" / "client.txt"
    version = lock.pins(client)["httpx"][0]
    text = client.read_text()
    assert f"\nhttpx=={version} " in text
    client.write_text(text.replace(f"\nhttpx=={version} ", "\nhttpx==0.27.0 ", 1))
    result = run_check(copy)
    assert result.returncode == 1
    assert f"pins httpx==0.27.0, requirements/platform-dev.txt pins {version}" in result.stderr


def test_the_rest_of_pyproject_and_whitespace_are_not_inputs(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    changed = text.replace("line-length = 100", "line-length = 99").replace(
        '"Django>=5.2,<5.3"', '"Django >= 5.2, < 5.3"'
    )
    assert changed != text
    pyproject.write_text(changed)
    result = run_check(copy)
    assert result.returncode == 0, result.stderr


def test_a_platform_pin_that_left_the_dev_lock_fails_the_check(copy: Path) -> None:
    runtime = copy / "requirements" / "platform.txt"
    version = lock.pins(runtime)["django"][0]
    text = runtime.read_text()
    assert f"\ndjango=={version} " in text
    runtime.write_text(text.replace(f"\ndjango=={version} ", "\ndjango==5.2.0 ", 1))
    result = run_check(copy)
    assert result.returncode == 1
    assert f"pins django==5.2.0, requirements/platform-dev.txt pins {version}" in result.stderr


def test_every_requirement_of_pyproject_is_met_by_its_pin() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    runtime = [*project["dependencies"], *data["build-system"]["requires"]]
    for lock_file, requirements in [
        ("requirements/platform.txt", runtime),
        ("requirements/platform-dev.txt", runtime + project["optional-dependencies"]["dev"]),
    ]:
        pinned = lock.pins(ROOT / lock_file)
        for line in requirements:
            requirement = Requirement(line)
            name = lock._canonical(requirement.name)
            assert name in pinned, f"{lock_file} has no pin for {line}"
            version = pinned[name][0]
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{lock_file} pins {name}=={version}, pyproject asks {line}"
            )
        assert "pip" in pinned  # the installer is locked too


def test_every_requirement_of_the_client_is_met_by_its_pin() -> None:
    data = tomllib.loads((ROOT / CLIENT / "pyproject.toml").read_text())
    pinned = lock.pins(ROOT / "requirements" / "client.txt")
    for line in [*data["project"]["dependencies"], *data["build-system"]["requires"]]:
        requirement = Requirement(line)
        name = lock._canonical(requirement.name)
        assert name in pinned, f"requirements/client.txt has no pin for {line}"
        assert requirement.specifier.contains(pinned[name][0], prereleases=True), line
    # The client lock is a slice of the platform's: `make install` adds no version of its own.
    dev = lock.pins(ROOT / "requirements" / "platform-dev.txt")
    assert {name: pin[0] for name, pin in pinned.items()} == {name: dev[name][0] for name in pinned}
    # And the client needs nothing of the platform's server side.
    assert "django" not in pinned


def test_test_only_packages_stay_out_of_the_platform_lock() -> None:
    runtime = lock.pins(ROOT / "requirements" / "platform.txt")
    dev = lock.pins(ROOT / "requirements" / "platform-dev.txt")
    for name in ("aiosmtpd", "pytest", "playwright", "hypothesis", "schemathesis", "mypy", "ruff"):
        assert name in dev
        assert name not in runtime
