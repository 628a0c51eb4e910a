"""Sphinx configuration of the Scheduler docs site (`make docs`).

Pages are Markdown (MyST). The reference pages marked "generated" in
docs/reference/ are written at build time from the code itself by the
extension in docs/_ext/, so they cannot drift from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# docs/_ext holds the project's own extension; the repository root makes the
# Django project importable for it (settings, URL conf), clients/python the client
# and schedctl's parser as this checkout has them, not the copy installed in the venv
# (`make install` reinstalls it only when a pyproject.toml or a lock changes).
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent), str(DOCS.parent / "clients" / "python")]

project = "Scheduler"
author = "the Scheduler authors"

extensions = [
    "myst_parser",
    "sphinx_copybutton",
    "sphinx_llms_txt",  # writes llms.txt and llms-full.txt next to the HTML
    "reference_pages",  # docs/_ext: the generated reference pages, and the HTML link check
]

# Every page is Markdown; there is no reStructuredText source.
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext", "**/_generated"]

# Broken cross-references are warnings, and `make docs` turns warnings into errors (-W).
nitpicky = True

# colon_fence: ::: admonitions that still read as Markdown; deflist: term / definition
# lists; heading anchors down to ### so `[x](page.md#section)` links resolve and
# are checked like any other reference.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "Scheduler"
# The pages' Markdown sources are published (sphinx-llms-txt builds llms-full.txt from them).
html_copy_source = True
html_show_sourcelink = False

# Prompts and outputs are not copied with a command.
copybutton_prompt_text = r"\$ |>>> "
copybutton_prompt_is_regexp = True

llms_txt_summary = (
    "Scheduler is a multi-tenant job scheduler: cron, delayed and one-off jobs fired on "
    "time, at least once, with leases and fencing."
)
