"""Every dashboard tab has its screenshot in the docs, and a browser test retakes it: the
images under docs/images/ named in ``tests.browser.browser_support.TAB_IMAGES`` exist, the
README shows each, and each is written by a ``doc_image(page, "<tab>")`` call of a browser test
(``make doc-images`` runs those tests with ``WORKBENCH_DOC_IMAGES=docs/images``). Issue 35."""

from __future__ import annotations

import re
from pathlib import Path

from tests.browser.browser_support import TAB_IMAGES

ROOT = Path(__file__).resolve().parents[2]


def dashboard_tabs() -> set[str]:
    """The tab titles ``workbench/ui/app.py`` builds (``("Models", models)``, ...)."""
    return set(re.findall(r'\("([A-Z][a-z]+)", ', (ROOT / "workbench" / "ui" / "app.py").read_text()))


def test_every_tab_has_a_screenshot_that_the_readme_shows() -> None:
    tabs = dashboard_tabs()
    assert {"Models", "Config", "Live", "Rollout", "Tuning", "Headless"} <= tabs
    assert tabs <= set(TAB_IMAGES), tabs - set(TAB_IMAGES)
    readme = (ROOT / "README.md").read_text()
    for tab, name in TAB_IMAGES.items():
        assert (ROOT / "docs" / "images" / name).is_file(), name
        assert f"(docs/images/{name})" in readme, (tab, name)


def test_every_screenshot_is_taken_by_a_browser_test() -> None:
    calls = "".join(path.read_text() for path in (ROOT / "tests" / "browser").glob("*.py"))
    taken = set(re.findall(r'doc_image\(page, "([A-Za-z]+)"', calls))
    assert taken == set(TAB_IMAGES), set(TAB_IMAGES) ^ taken
    makefile = (ROOT / "Makefile").read_text()
    assert "WORKBENCH_DOC_IMAGES=docs/images" in makefile
