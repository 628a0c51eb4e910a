"""The generated reference pages, written from the code at every docs build.

At `builder-inited` (before Sphinx looks for sources) each page of PAGES is
rendered from the code and written to docs/reference/<name>.md, only when its
text changed (so an unchanged page is not rebuilt). Those files are gitignored:
the code is their only source. A page whose source cannot be read fails the
build rather than publishing something stale or empty.

The build also checks every relative link of the HTML it wrote (links.py): the
few a Markdown cross-reference does not cover (raw HTML) must resolve too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

from reference_pages import api, bench, cli, links, metrics, vocabulary

log = logging.getLogger(__name__)


def _django() -> None:
    # The development settings, whatever the builder's environment names: the
    # pages describe the product, not the machine that builds them. SECRET_KEY is
    # set so the settings do not write a development key into DATA_DIR; nothing
    # here connects to a database or broker.
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("SECRET_KEY", "docs-build-only")
    import django

    django.setup()


def _pages(docs: Path) -> dict[str, Callable[[], str]]:
    generated = docs / "reference" / "_generated"
    return {
        "api": lambda: api.write(docs, generated),
        "schedctl": cli.render,
        "explainer-codes": vocabulary.explainer_codes,
        "events": vocabulary.events,
        "metrics": metrics.render,
        "benchmarks": lambda: bench.render(docs),
    }


def write_pages(app: Sphinx) -> None:
    docs = Path(app.srcdir)
    _django()
    for name, render in _pages(docs).items():
        try:
            text = render()
        except Exception as exc:
            raise ExtensionError(f"reference page {name}.md: {exc}", exc) from exc
        target = docs / "reference" / f"{name}.md"
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            log.info("wrote reference/%s.md", name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", write_pages)
    app.connect("build-finished", links.check_build)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
