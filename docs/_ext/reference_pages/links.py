"""Every relative link of the built HTML must lead somewhere.

MyST already warns (and -W fails the build) on a Markdown link to a page or
#anchor that does not exist. Raw HTML in a page (`<a href="…">`) is passed
through unread, so this reads every page Sphinx wrote and checks each relative
`href` / `src`: the file must exist, and a `#fragment` must be an id in it.
External links (a scheme, `//host`) are not followed: the build has no network.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sphinx.application import Sphinx
from sphinx.util import logging

log = logging.getLogger(__name__)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif name in ("href", "src"):
                self.links.append((self.getpos()[0], value))


def _parse(path: Path, cache: dict[Path, _Page]) -> _Page:
    if path not in cache:
        page = _Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = page
    return cache[path]


def broken_links(outdir: Path) -> list[str]:
    cache: dict[Path, _Page] = {}
    problems = []
    for page_path in sorted(outdir.rglob("*.html")):
        page = _parse(page_path, cache)
        for line, link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (http:, mailto:, data:, javascript:)
            target = (page_path.parent / unquote(parts.path)).resolve() if parts.path else page_path
            where = f"{page_path.relative_to(outdir)}:{line}"
            if not target.exists():
                problems.append(f"{where}: {link} leads to no file")
                continue
            if target.is_dir():
                target = target / "index.html"
                if not target.exists():
                    problems.append(f"{where}: {link} is a folder without index.html")
                    continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in _parse(target, cache).ids:
                problems.append(f"{where}: {link}: no id {fragment!r} in {target.name}")
    return problems


def check_build(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for problem in broken_links(Path(app.outdir)):
        log.warning("broken link: %s", problem, type="reference_pages", subtype="link")
