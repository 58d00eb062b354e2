"""Panel's stylesheets stay off its CDN (workbench.ui.shared.local_css): Panel's fallback for a pane
updated outside the document (its model in a tab not shown) is the session's own copy in a
server session, and inline CSS in a notebook with ``inline=True``. The browser tests
(tests/browser/test_resources_browser.py) watch the requests of both hosts."""

from __future__ import annotations

import base64
import weakref
from typing import cast

import panel as pn
import pytest
from bokeh.application.application import SessionContext
from bokeh.document import Document
from bokeh.models import ImportedStyleSheet
from panel.io.resources import CDN_DIST, DIST_DIR, LOCAL_DIST
from panel.io.state import set_curdoc

from workbench.ui.shared.local_css import keep_stylesheets_local, patch_stylesheet


class _Context:
    """Stands for a Bokeh server session's context (only its presence is read)."""


_CONTEXT = _Context()


def _served_document() -> Document:
    document = Document()
    # what a Bokeh server session sets (only the context's presence is read: a stand-in will do)
    document._session_context = weakref.ref(cast(SessionContext, _CONTEXT))
    document.template_variables["dist_url"] = LOCAL_DIST
    return document


def test_a_pane_updated_outside_its_document_keeps_the_sessions_copy() -> None:
    stylesheet = ImportedStyleSheet(url=f"{LOCAL_DIST}css/markdown.css")
    with set_curdoc(_served_document()):
        patch_stylesheet(stylesheet, CDN_DIST)  # Panel's fallback when it sees no document
    assert stylesheet.url.startswith(f"{LOCAL_DIST}css/markdown.css")


def test_inline_mode_turns_a_cdn_stylesheet_into_inline_css(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pn.config, "inline", True)
    stylesheet = ImportedStyleSheet(url=f"{CDN_DIST}css/markdown.css")
    patch_stylesheet(stylesheet, CDN_DIST)
    prefix = "data:text/css;base64,"
    assert stylesheet.url.startswith(prefix)
    assert base64.b64decode(stylesheet.url[len(prefix):]) == (DIST_DIR / "css" / "markdown.css").read_bytes()


def test_without_inline_mode_or_a_session_panel_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pn.config, "inline", False)  # an inline dashboard() earlier set it
    stylesheet = ImportedStyleSheet(url=f"{CDN_DIST}css/markdown.css")
    patch_stylesheet(stylesheet, CDN_DIST)
    assert stylesheet.url == f"{CDN_DIST}css/markdown.css"


def test_installed_where_panel_calls_it() -> None:
    import panel.io.resources
    import panel.reactive

    keep_stylesheets_local()
    keep_stylesheets_local()
    assert panel.io.resources.patch_stylesheet is patch_stylesheet
    assert panel.reactive.patch_stylesheet is patch_stylesheet
