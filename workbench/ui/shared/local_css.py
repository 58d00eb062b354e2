"""Panel's component stylesheets never point a browser at Panel's CDN (``cdn.holoviz.org``):
the dashboard renders where the browser has no internet, in both hosts.

Panel (1.9) names each component's stylesheets (``loading.css``, ``markdown.css``, its
themes' ``default.css`` / ``native.css``, ...) by CDN URL and rewrites them, in
``panel.io.resources.patch_stylesheet``, to the document's ``dist_url`` (its server's copy),
falling back to the CDN where it sees no document. It sees none when a pane whose Bokeh
model is not in the document right now (a tab that is not shown, ``pn.Tabs(dynamic=True)``)
is updated; the stylesheet objects it rewrites then are shared (Panel caches them per
document) with the models on the page, which the browser re-fetches from the CDN. In a
notebook with ``pn.extension(inline=True)``, Panel inlines the stylesheets of the first
render only; models rendered later (another tab opened) keep CDN URLs.

:func:`keep_stylesheets_local` wraps ``patch_stylesheet`` (the one place every component
stylesheet passes through) so that:

* in a Bokeh server session (the Jupyter-hosted dashboard), the fallback is that session's
  ``dist_url`` (the server's copy, ``static/extensions/panel/``), not the CDN;
* elsewhere, with ``pn.config.inline`` (the inline notebook dashboard), a stylesheet left on
  the CDN becomes a ``data:`` URL of Panel's own copy of the file (what Panel's inline mode
  does for the first render).
"""

from __future__ import annotations

import base64
from functools import lru_cache

import panel as pn
import panel.io.resources as panel_resources
import panel.reactive as panel_reactive
from panel.io.state import state

_CDN_DIST = panel_resources.CDN_DIST


def _session_dist_url(stylesheet: object) -> str | None:
    """The ``dist_url`` (not the CDN's) of the Bokeh server session the stylesheet is shown
    in, or of the session whose callback runs now; None outside a server session."""
    for document in (getattr(stylesheet, "document", None), state.curdoc):
        if document is not None and document.session_context is not None:
            dist_url = document.template_variables.get("dist_url")
            if dist_url and dist_url != _CDN_DIST:
                return dist_url
    return None


@lru_cache(maxsize=64)
def _data_url(relative: str) -> str | None:
    """``data:`` URL of Panel's copy of ``relative`` (a path under its ``dist`` folder)."""
    path = panel_resources.DIST_DIR / relative
    if not path.is_file():
        return None
    return "data:text/css;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def patch_stylesheet(stylesheet: object, dist_url: str, *, _panel=panel_resources.patch_stylesheet) -> None:
    """Panel's ``patch_stylesheet`` (point a Bokeh ``ImportedStyleSheet`` at ``dist_url``),
    never leaving it on the CDN where a server session's copy or inline CSS is wanted (see
    the module docstring)."""
    if dist_url == _CDN_DIST:
        dist_url = _session_dist_url(stylesheet) or dist_url
    _panel(stylesheet, dist_url)
    if dist_url != _CDN_DIST or not pn.config.inline:
        return
    try:
        url = str(stylesheet.url)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an unset url, as Panel's own function tolerates
        return
    if url.startswith(_CDN_DIST):
        inline = _data_url(url[len(_CDN_DIST):].split("?")[0])
        if inline is not None:
            stylesheet.url = inline  # type: ignore[attr-defined]


# patch_stylesheet is Panel's undocumented helper, held by two of its modules: checked by
# tests/architecture/test_library_internals.py (Panel's bound in pyproject.toml)
def keep_stylesheets_local() -> None:
    """Install :func:`patch_stylesheet` in Panel (idempotent; process-wide, in force only in
    a server session with its own ``dist_url`` or with ``pn.config.inline``)."""
    panel_resources.patch_stylesheet = patch_stylesheet
    panel_reactive.patch_stylesheet = patch_stylesheet  # reactive imported it by name


__all__ = ["keep_stylesheets_local", "patch_stylesheet"]
