"""Every relative link in README.md, ARCHITECTURE.md and docs/ resolves, anchors included, as
GitHub renders them (scripts/doc_links.py). README.md and ARCHITECTURE.md lie outside the MkDocs
site, whose strict build (`make docs`, run by `make lint`) checks the links between its pages."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _doc_links() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_links", ROOT / "scripts" / "doc_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


doc_links = _doc_links()


@pytest.mark.parametrize("name", ["README.md", "ARCHITECTURE.md"])
def test_links_outside_the_site_resolve(name: str) -> None:
    assert doc_links.broken_links(ROOT / name) == []


def test_links_of_the_docs_pages_resolve_on_github_too() -> None:
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert len(pages) > 15
    assert [problem for page in pages for problem in doc_links.broken_links(page)] == []


def test_every_docs_page_is_in_the_site_nav() -> None:
    """MkDocs' own check (`validation.nav.omitted_files`) needs mkdocs; this one runs anywhere."""
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == sorted(nav)


def test_the_checker_sees_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## `workbench serve` flags (beyond Triton)\n\n"
                                       "## A + B\n\n## Twice\n\n## Twice\n")
    (tmp_path / "images").mkdir()
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md) [ok](other.md#workbench-serve-flags-beyond-triton) [ok](other.md#a--b)\n"
        "[ok](other.md#twice-1) [ok](#page) [ok](https://example.com/x) ![ok](images)\n"
        "[file](missing.md) [anchor](other.md#nope) [self](#nope) [abs](/etc/passwd) ![img](images/x.png)\n"
        "`[code](skipped.md)`\n\n```\n[fenced](skipped.md)\n```\n")
    assert doc_links.broken_links(page) == [
        "page.md: missing.md: no such file",
        "page.md: other.md#nope: other.md has no heading with the anchor #nope",
        "page.md: #nope: page.md has no heading with the anchor #nope",
        "page.md: /etc/passwd: an absolute path (write it relative to page.md)",
        "page.md: images/x.png: no such file",
    ]


def test_github_slugs() -> None:
    assert doc_links.github_slug("HTTP API (KServe v2 + Triton extensions)") == "http-api-kserve-v2--triton-extensions"
    assert doc_links.github_slug(doc_links.heading_text("gRPC API (`inference.GRPCInferenceService`)")) == \
        "grpc-api-inferencegrpcinferenceservice"
    assert doc_links.github_slug("Live: why is p99 high?") == "live-why-is-p99-high"
