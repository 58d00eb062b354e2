"""Links in the project's Markdown, checked the way GitHub renders them.

Two users:

- ``mkdocs.yml`` loads this file as its hook. MkDocs (strict, with ``validation:``) checks every
  link between pages of ``docs/`` and its anchors; this hook makes the anchors GitHub's
  (``on_config``), so a link works on the site and on GitHub alike, and handles the links MkDocs
  cannot see: a page's link to a file of the repository outside ``docs/``
  (``../ARCHITECTURE.md``, ``../bench/RESULTS.md#...``) must name a file that exists, and an
  anchor that its headings give, else a warning fails the strict build; on the site it points to
  the file in the checkout (``repo_url``'s file view when ``mkdocs.yml`` sets one).
- ``tests/docs/test_doc_links.py`` checks README.md's relative links and anchors
  (:func:`broken_links`): README.md lies outside ``docs/``, where MkDocs does not look.

Links inside code (fenced blocks, inline code spans) are not links and are skipped.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]

#: ``[text](target)`` and ``![alt](target)``, an optional title after the target
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: fenced code blocks (``` or ~~~, to the same fence) and inline code spans
CODE = re.compile(r"^(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^(?P=fence)[ \t]*$|(?P<ticks>`+)(?!`).+?(?<!`)(?P=ticks)(?!`)",
                  re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
#: the scheme a rewritten outside link carries from the Markdown to the HTML (MkDocs leaves links
#: with a scheme alone)
REPOSITORY_SCHEME = "workbench-repository:"

log = logging.getLogger("mkdocs.hooks.doc_links")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, every character but letters, digits,
    ``_``, ``-`` and spaces dropped, each space a ``-`` (not collapsed: ``a + b`` is ``a--b``)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def heading_text(markdown: str) -> str:
    """A heading's Markdown as the text GitHub slugs: code ticks, emphasis and link targets gone."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"[`*]", "", text)


def code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the fenced code blocks and inline code spans of ``text``."""
    return [m.span() for m in CODE.finditer(text)]


def links(text: str) -> list[re.Match[str]]:
    """The link matches of ``text`` outside code; group 1 is the target as written."""
    spans = code_spans(text)
    return [m for m in LINK.finditer(text) if not any(a <= m.start() < b for a, b in spans)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file: one per heading (outside code; repeats get
    ``-1``, ``-2``, ...) and every explicit ``<a id=...>`` / ``<a name=...>``."""
    spans = code_spans(text)
    found: set[str] = set(EXPLICIT_ANCHOR.findall(text))
    counts: dict[str, int] = {}
    for match in HEADING.finditer(text):
        if any(a <= match.start() < b for a, b in spans):
            continue
        slug = github_slug(heading_text(match.group(1)))
        seen = counts.get(slug, 0)
        counts[slug] = seen + 1
        found.add(slug if seen == 0 else f"{slug}-{seen}")
    return found


def is_external(target: str) -> bool:
    """A URL with a scheme (``https:``, ``mailto:``) or a host (``//host/...``)."""
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", target))


def link_problem(source: Path, target: str) -> str | None:
    """Why ``target``, a link in the Markdown file ``source``, does not resolve (None: it does).
    A relative path must name an existing file or folder; an anchor into a Markdown file (or
    into ``source`` itself: ``#anchor``) must be one of its :func:`anchors`."""
    if is_external(target):
        return None
    path, _, fragment = target.partition("#")
    file = (source.parent / unquote(path)).resolve() if path else source
    if path.startswith("/"):
        return f"{target}: an absolute path (write it relative to {source.name})"
    if not file.exists():
        return f"{target}: no such file"
    if fragment and file.suffix == ".md" and unquote(fragment) not in anchors(file.read_text()):
        return f"{target}: {file.name} has no heading with the anchor #{fragment}"
    return None


def broken_links(source: Path) -> list[str]:
    """Every link of the Markdown file ``source`` that does not resolve, with why."""
    text = source.read_text()
    return [f"{source.name}: {problem}" for m in links(text)
            if (problem := link_problem(source, m.group(1))) is not None]


# --- the MkDocs hook (mkdocs.yml: hooks) ---------------------------------------------------------


def _markdown_slug(value: str, separator: str) -> str:
    """Python-Markdown's ``toc`` slugify signature, GitHub's anchors."""
    return github_slug(value)


def on_config(config: Any) -> Any:
    """The site's heading anchors are GitHub's, so one link works on both."""
    config.mdx_configs.setdefault("toc", {})["slugify"] = _markdown_slug
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Checks the page's links to repository files outside ``docs/`` (a warning, so an error in
    strict mode, for one that does not resolve) and marks them for :func:`on_page_content`."""
    source = Path(page.file.abs_src_path)
    docs = Path(config.docs_dir).resolve()
    out, last = [], 0
    for match in links(markdown):
        target = match.group(1)
        path = target.partition("#")[0]
        if is_external(target) or not path:
            continue
        resolved = (source.parent / unquote(path)).resolve()
        if resolved.is_relative_to(docs):
            continue  # MkDocs' own validation checks links between pages
        problem = link_problem(source, target)
        if problem is not None:
            log.warning("Doc file '%s' contains a link to a repository file that does not resolve: %s",
                        page.file.src_uri, problem)
            continue
        fragment = target[len(path):]
        repository_path = resolved.relative_to(ROOT).as_posix()
        start, end = match.span(1)
        out += [markdown[last:start], REPOSITORY_SCHEME + repository_path + fragment]
        last = end
    return "".join([*out, markdown[last:]])


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """The marked links point to the file in the checkout, relative to the built page (or to
    ``repo_url``'s file view when set)."""
    page_dir = (Path(config.site_dir) / page.file.dest_uri).parent

    def url(match: re.Match[str]) -> str:
        path, _, fragment = match.group(1).partition("#")
        if config.repo_url:
            href = f"{config.repo_url.rstrip('/')}/blob/HEAD/{path}"
        else:
            href = Path(os.path.relpath(ROOT / path, page_dir)).as_posix()
        return f'href="{href}{"#" + fragment if fragment else ""}"'

    return re.sub(rf'href="{re.escape(REPOSITORY_SCHEME)}([^"]*)"', url, html)
