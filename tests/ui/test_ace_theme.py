"""The Config editor's Ace theme is inlined with Ace's scripts in the notebook dashboard
(:mod:`workbench.ui.shared.ace_theme`): before, Ace fetched it beside the notebook's URL and the
editor had no theme. The browser checks are in tests/browser (both hosts)."""

from __future__ import annotations

import panel as pn
from bokeh.resources import INLINE
from panel.io.resources import Resources, set_resource_mode

from workbench.ui.shared.ace_theme import EDITOR_THEME, EDITOR_THEME_CLASS, ship_editor_theme


def test_the_notebooks_inlined_scripts_define_the_theme_after_ace() -> None:
    ship_editor_theme()
    pn.extension("codeeditor", inline=True)
    with set_resource_mode("inline"):
        resources = Resources.from_bokeh(INLINE, notebook=True)
        scripts = resources.js_raw
        urls = resources.js_files
    ace = [i for i, js in enumerate(scripts) if 'ace.define("ace/loader_build"' in js]
    theme = [i for i, js in enumerate(scripts) if f'ace.define("ace/theme/{EDITOR_THEME}"' in js]
    assert ace and theme and ace[0] < theme[0]
    assert EDITOR_THEME_CLASS in scripts[theme[0]]
    assert not [url for url in urls if "theme-" in url]  # nothing for the browser to fetch


def test_the_editor_uses_the_shipped_theme() -> None:
    assert ship_editor_theme() == ship_editor_theme()  # added once
    assert pn.widgets.CodeEditor(theme=EDITOR_THEME).theme == EDITOR_THEME
