"""Changing Bokeh models (a figure, its data sources) from background work, as each host
requires: Panel widgets do this themselves, raw Bokeh models do not.

* A Bokeh server session (the Jupyter-hosted dashboard, ``panel serve``): the document may
  only change while its session's lock is held, or Bokeh refuses the change with
  ``RuntimeError: _pending_writes should be non-None when we have a document lock``; the
  change is handed to ``Document.add_next_tick_callback``, which Bokeh runs on the session's
  loop holding the lock and then sends to the browser (also safe from another thread).
* A notebook (the inline dashboard of a kernel): there is no lock; the change is made now,
  with the document held (a notebook's document is not held between Panel's own updates:
  the change's events would be dispatched to no one and lost), and its events are pushed
  over the notebook's comm (:func:`panel.io.push_notebook`) before the hold ends.
* A model not shown anywhere (not rendered yet, tests): the change is made now.
"""

from __future__ import annotations

from collections.abc import Callable

import panel as pn
from bokeh.model import Model


def change_models(model: Model, change: Callable[[], None],
                  shown_in: pn.viewable.Viewable | None = None) -> None:
    """Run ``change()`` (which changes ``model`` or models in its document) as its host
    requires (see the module docstring). In a server session it runs later, on the next tick
    of the session's loop, in the order the changes were made.

    Args:
        model: a Bokeh model the change touches (its ``document`` says where it is shown).
        change: the change; exceptions it raises in a server session are Bokeh's to log.
        shown_in: the Panel object showing ``model`` in a notebook, to push the change.
    """
    document = model.document
    if document is not None and document.session_context is not None:
        document.add_next_tick_callback(change)
        return
    if document is None or shown_in is None:
        change()
        return
    held = document.callbacks.hold_value
    if held is None:
        document.hold("combine")  # collect the change's events for the push
    try:
        change()
        pn.io.push_notebook(shown_in)
    finally:
        if held is None:
            document.unhold()


__all__ = ["change_models"]
