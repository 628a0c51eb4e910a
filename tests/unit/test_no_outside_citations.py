"""No file in the repository cites a document that is not in it.

The design and failure contracts the code relies on are pages of the docs site
(docs/explanation/, e.g. failure-contract.md for the rules C1-C8), and comments
cite those pages by path. A citation of guidance kept outside the repository
points a reader at nothing, so any tracked text file that names one of those
outside documents, or a path into a sibling `shared` folder, fails this test —
unless a file of that name is tracked in the repository after all.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Spelled in parts so that this file does not cite them itself.
OUTSIDE_DOCUMENTS = tuple(name + ".md" for name in ("DESIGN", "RELIABILITY", "STYLE"))
OUTSIDE_FOLDER = ".." + "/shared"


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing to list")
    return [name for name in out.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file's text, or None for what is not a regular text file."""
    if path.is_symlink() or not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    files = tracked_files()
    present = {Path(name).name for name in files}
    missing = [name for name in OUTSIDE_DOCUMENTS if name not in present]
    needles = [*missing, OUTSIDE_FOLDER]
    offenders = []
    for name in files:
        text = text_of(ROOT / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for needle in needles:
                if needle in line:
                    offenders.append(f"{name}:{number}: cites {needle}")
    assert not offenders, (
        "cite a page of the docs site (docs/...) instead of a document outside the "
        "repository:\n" + "\n".join(offenders)
    )
