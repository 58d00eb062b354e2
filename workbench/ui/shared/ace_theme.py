"""The Config editor's Ace theme travels with Ace's own scripts, in both hosts.

Panel's ``CodeEditor`` (its Bokeh model ``AcePlot``, Panel 1.9) ships three Ace scripts
(``AcePlot.__javascript_raw__``: ``ace.js``, ``ext-language_tools.js``, ``ext-modelist.js``).
Ace loads a theme on first use, from the folder it infers from the ``src`` of the ``<script>``
that loaded ``ace.js``. The Jupyter-hosted dashboard loads Panel's scripts by URL, so Ace finds
its folder. The inline notebook dashboard (``pn.extension(inline=True)``) inlines them: no
``src``, so Ace logged "Unable to infer path to ace from script src" when the first editor
opened and fetched ``theme-github_light_default.js`` relative to the notebook's URL, where Lab
answers with a page the browser refuses: the editor showed without its theme.

:func:`ship_editor_theme` adds the theme's file (Panel's bundled copy) to those scripts:
inlined in the notebook and served by the Bokeh session's server in Jupyter, it defines Ace's
theme module before the editor asks for it, and Ace fetches nothing.
"""

from __future__ import annotations

import posixpath

from panel.models.ace import AcePlot

#: the theme of the Config editor (Panel's default for its light theme)
EDITOR_THEME = "github_light_default"
#: the class Ace gives an editor once the theme is applied (the theme file's ``cssClass``)
EDITOR_THEME_CLASS = "ace-github-light-default"


def ship_editor_theme(theme: str = EDITOR_THEME) -> str:
    """Add Ace's ``theme-<theme>.js`` to the scripts Panel ships with every ``CodeEditor``
    (idempotent) and return its URL. Call before Panel renders its resources (before
    ``pn.extension`` in a notebook)."""
    ace_js = next(url for url in AcePlot.__javascript_raw__ if url.endswith("/ace.js"))
    url = f"{posixpath.dirname(ace_js)}/theme-{theme}.js"
    if url not in AcePlot.__javascript_raw__:
        AcePlot.__javascript_raw__.append(url)
    return url


__all__ = ["EDITOR_THEME", "EDITOR_THEME_CLASS", "ship_editor_theme"]
