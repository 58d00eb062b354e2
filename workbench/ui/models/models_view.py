"""The Models tab: every model and version with its state, reason, served config (backend,
instance groups, ``max_batch_size``, batching), live requests/s, p99 and failures, and
memory (:mod:`workbench.ui.models.model_rows`); load, unload and reload; a version policy to try.

The table follows the engine: each action refreshes it when it ends, and
:meth:`ModelsView.tick` (the dashboard's one-second beat) too, so changes made elsewhere show
within a second or two. Columns sort by value (memory by bytes); a row's **Config** and
**Live** buttons move the session's shared selection (:mod:`workbench.ui.shared.selection`). Load and
unload need explicit mode; the engine's refusal (Triton's text), as every failure, is shown in
the tab's error pane, never as a traceback. The version policy is applied as a load with a
config override (:mod:`workbench.config_edits.overrides`): the file is not written, a later
Reload reads ``config.pbtxt`` again, as Triton's load API does.

Threading: the table and banners change from tasks on the engine's loop, so every change goes
through the session document's lock (a next-tick callback, ``ModelsView._in_document``);
without a server session (a notebook's comm, tests) it is made at once. What a person sees:
docs/dashboard.md (**Models**)."""

from __future__ import annotations

import html
import logging
from collections.abc import Callable

import panel as pn
from bokeh.models.widgets.tables import HTMLTemplateFormatter, NumberFormatter
from panel.io.state import set_curdoc

from workbench.config_edits.overrides import POLICY_KINDS, VersionPolicy, current_config, load_with, read_policy
from workbench.serving.live_stats import LiveSample, LiveStatistics
from workbench.ui.models.model_rows import ModelRow, model_rows
from workbench.ui.shared.store import EngineStore, Spawned, user_text

log = logging.getLogger(__name__)

#: the buttons of each row: field -> label (the tab they open). They are data columns right
#: after the model and version, not Tabulator's ``buttons`` (which come after every data
#: column and were off-screen to the right at a 1400 px wide window).
BUTTONS = {"config": "⚙ Config", "live": "Live"}
#: icons drawn before a button's label, shipped with the page (inline SVG in the button's
#: template: an emoji such as 📈 is a missing-glyph box on a machine without an emoji font)
BUTTON_ICONS = {"live": ('<svg width="14" height="12" viewBox="0 0 14 12" aria-hidden="true" '
                         'style="vertical-align:-1px;margin-right:4px"><polyline points="1,11 5,6 8,8 13,1" '
                         'fill="none" stroke="currentColor" stroke-width="1.6"/></svg>')}
#: table columns, in order: why a version is not READY (``reason``) right after its state,
#: on screen at a 1400 px wide window (as the last column it was off to the right)
COLUMNS = ("model", "version", *BUTTONS, "state", "reason", "backend", "instances", "max_batch_size",
           "batching", "requests_per_s", "p99_ms", "failures", "memory")
#: each shown column's width (px): 1,350 in all, within the 1,380 px a 1400 px wide window
#: leaves the Jupyter-hosted page's table. A header word plus the sort arrow (16 px of padding,
#: Tabulator's 25 less room its 12 px arrow does not use) in JupyterLab's larger font, and a
#: cell's longest word ("UNAVAILABLE", "⚙ Config"), set the least of each.
COLUMN_WIDTHS = {"model": 110, "version": 96, "config": 92, "live": 80, "state": 100, "reason": 150,
                 "backend": 100, "instances": 104, "max_batch_size": 72, "batching": 100,
                 "requests_per_s": 72, "p99_ms": 72, "failures": 92, "memory": 110}
#: the table's cells and header titles wrap at spaces (and a long model name anywhere)
#: instead of ending in "…": every figure stays whole in its set width; the reason cell alone
#: keeps one line ("…"), its whole text in the reason line under the table and its tooltip.
#: (``!important``: Tabulator's own rules name more classes)
TABLE_CSS = """
.tabulator-col .tabulator-col-title { white-space: normal !important; }
.tabulator-col.tabulator-sortable .tabulator-col-title { padding-right: 16px !important; }
.tabulator-cell:not([tabulator-field="reason"]) { white-space: normal !important; overflow-wrap: anywhere; }
"""
#: columns the memory cell's template reads, not shown
HIDDEN = ("memory_text", "memory_note")
#: column headers shown (the p99 one names its window: :func:`window_titles`)
TITLES = {"max_batch_size": "max batch", "requests_per_s": "req/s", "p99_ms": "p99 (ms)",
          "memory": "memory", "config": "", "live": ""}


def _button_template(field: str) -> str:
    """How a button cell looks (a Bokeh-like button with its icon; the click is the table's
    cell click)."""
    return ('<span role="button" style="cursor:pointer;border:1px solid #ccc;border-radius:4px;'
            f'padding:1px 6px;white-space:nowrap">{BUTTON_ICONS.get(field, "")}<%= value %></span>')


#: the reason cell: the text, cut to the column, and all of it on hover (``<%- %>``: escaped)
_REASON_TEMPLATE = '<span title="<%- value %>"><%- value %></span>'
#: tab titles the buttons open
BUTTON_TABS = {"config": "Config", "live": "Live"}
#: header tooltips (the live columns' name their window: :func:`window_titles`)
HEADER_TOOLTIPS = {
    "memory": "≈: the loader's estimate (resident-memory growth while loading); "
              "without ≈: reported by the backend. Hover a cell for how it was measured.",
}


def window_titles(interval_s: float) -> tuple[dict[str, str], dict[str, str]]:
    """The table's header titles and tooltips, the live columns naming their window (the
    dashboard's beat, ``interval_s`` **seconds**) as the Live tab names its own ("1 s",
    "30 s"): a p99 over the last 1 s, not the Live tab's 30 s diagnosis window."""
    window = f"{interval_s:.0f}\u00a0s" if interval_s >= 0.95 else f"{interval_s:.2g}\u00a0s"
    titles = {**TITLES, "p99_ms": f"p99 {window} (ms)"}
    tooltips = {"requests_per_s": f"successful requests per second over the last {window}",
                "p99_ms": f"p99 request latency in the server over the last {window} (ms)",
                "failures": f"failed requests over the last {window}", **HEADER_TOOLTIPS}
    return titles, tooltips


class ModelsView(pn.viewable.Viewer):
    """The Models tab of one dashboard session; every action is also a coroutine method
    (:meth:`load`, :meth:`unload`, :meth:`reload`, :meth:`apply_policy`, :meth:`refresh`)
    that the buttons spawn on the engine's loop.

    Args:
        store: the engine (and the session's model selection).
        live: the session's live statistics (the latest interval of each READY version
            fills the requests/s, p99 and failures columns); None: those stay empty.
        open_tab: called with a tab's title ("Config", "Live") by a row's buttons; None: the
            buttons only select the model.
        interval_s: the live interval, **seconds** (the dashboard's beat), named in the
            live columns' headers.
    """

    def __init__(self, store: EngineStore, live: LiveStatistics | None = None,
                 open_tab: Callable[[str], None] | None = None, interval_s: float = 1.0,
                 **params) -> None:
        super().__init__(**params)
        self.store = store
        self.live = live
        self.open_tab = open_tab
        self.rows: list[ModelRow] = []
        self._doc = pn.state.curdoc
        self._refreshing: Spawned | None = None
        titles, tooltips = window_titles(interval_s)
        self.table = pn.widgets.Tabulator(
            _frame([]), disabled=True, show_index=False, selectable=1, max_height=560,
            sizing_mode="stretch_width", label="models", titles=titles,
            hidden_columns=list(HIDDEN), header_tooltips=tooltips,
            # every column within a 1400 px window at a set width, whatever the models' names
            # (a long name such as digits_jpeg_preprocess widened the model column and pushed
            # the memory column past the table); text wraps in its cell (TABLE_CSS) rather than
            # being cut, but for a long reason, whole in the row's reason line and the tooltip
            widths=COLUMN_WIDTHS, stylesheets=[TABLE_CSS],
            frozen_columns=["model", "version", *BUTTONS],
            formatters={
                "max_batch_size": NumberFormatter(format="0", nan_format="–"),
                "requests_per_s": NumberFormatter(format="0.0", nan_format="–"),
                "p99_ms": NumberFormatter(format="0.00", nan_format="–"),
                "failures": NumberFormatter(format="0", nan_format="–"),
                "memory": HTMLTemplateFormatter(
                    template='<span title="<%= memory_note %>"><%= memory_text %></span>'),
                "reason": HTMLTemplateFormatter(template=_REASON_TEMPLATE),
                **{field: HTMLTemplateFormatter(template=_button_template(field)) for field in BUTTONS},
            },
            sortable={field: False for field in BUTTONS})  # no header, nothing to sort by
        #: the selected row's reason in full (the column shows the start of a long one)
        #: (HTML of escaped text, not Markdown: a reason's `input__0` or `*` are not markup)
        self.reason = pn.pane.HTML("", visible=False, sizing_mode="stretch_width")
        self.model = pn.widgets.Select(label="Model", options=[])
        self.refresh_button = pn.widgets.Button(label="Refresh")
        self.load_button = pn.widgets.Button(label="Load", color="primary")
        self.unload_button = pn.widgets.Button(label="Unload", color="warning")
        self.reload_button = pn.widgets.Button(label="Reload")
        self.policy_kind = pn.widgets.RadioButtonGroup(label="Version policy",
                                                       options=list(POLICY_KINDS), value="latest")
        self.num_versions = pn.widgets.IntInput(label="Latest versions", value=1, start=1, width=140)
        self.versions = pn.widgets.TextInput(label="Specific versions", placeholder="1, 3",
                                             width=160)
        self.policy_button = pn.widgets.Button(label="Apply version policy")
        self.status = pn.pane.Alert("", alert_type="success", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self._wire()

    def _wire(self) -> None:
        actions = {self.refresh_button: self.refresh, self.load_button: self.load,
                   self.unload_button: self.unload, self.reload_button: self.reload,
                   self.policy_button: self.apply_policy}
        for button, action in actions.items():
            button.on_click(self.store.starter(action))
        self.table.param.watch(self._on_selection, "selection")
        self.table.on_click(self._on_click)
        self.model.param.watch(self.store.starter(self.show_policy), "value")
        self.store.selection.bind(self.model)

    def name_window(self, interval_s: float) -> None:
        """Name a new live interval (**seconds**) in the live columns' headers."""
        self.table.titles, self.table.header_tooltips = window_titles(interval_s)

    def __panel__(self) -> pn.viewable.Viewable:
        policy = pn.Row(self.policy_kind, self.num_versions, self.versions, self.policy_button)
        return pn.Column(
            pn.Row(self.model, self.load_button, self.unload_button, self.reload_button,
                   self.refresh_button),
            self.error, self.status, self.table, self.reason,
            pn.pane.Markdown("**Version policy** (tried with a config override; the file is "
                             "not written)"),
            policy, sizing_mode="stretch_width")

    def tick(self) -> None:
        """One beat of the dashboard: refresh the table from the engine (unless the previous
        refresh still runs), so changes made elsewhere show within a beat or two."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = self.store.spawn(self.refresh())

    # ----------------------------------------------------------------- actions
    async def refresh(self) -> None:
        """Re-read the repository index, the served configs, memory usage and the latest
        live interval into the table (through the document's lock)."""
        rows = await self.store.attempt(lambda: model_rows(self.store.server, self._latest()),
                                        self.show_error)
        if rows is not None:
            self._in_document(lambda: self._show_rows(rows))

    def _latest(self) -> dict[tuple[str, str], LiveSample]:
        if self.live is None:
            return {}
        return {key: kept[-1] for key, kept in self.live.history.items() if kept}

    def _show_rows(self, rows: list[ModelRow]) -> None:
        self.rows = rows
        frame = _frame(rows)
        if not frame.equals(self.table.value):
            self.table.value = frame
        self._show_reason(self.table.selection)
        names = sorted({row.name for row in rows})
        if names != list(self.model.options):
            self.model.options = names
        if names and self.model.value not in names:
            self.model.value = names[0]
        if not self.store.selection.name and names:
            self.store.selection.choose(first_model(rows))

    async def load(self) -> None:
        """Load the selected model (explicit mode)."""
        await self._act("loaded", lambda name: self.store.server.load_model(name))

    async def reload(self) -> None:
        """Load the selected model again from its ``config.pbtxt`` (a hot reload when it is
        loaded: no request is dropped)."""
        await self._act("reloaded", lambda name: self.store.server.load_model(name))

    async def unload(self) -> None:
        """Unload the selected model after its in-flight requests finish."""
        await self._act("unloaded", lambda name: self.store.server.unload_model(name))

    async def apply_policy(self) -> None:
        """Reload the selected model with the chosen version policy (a config override)."""
        try:
            policy = self.policy()
        except ValueError as exc:
            self.show_error(f"version policy: {exc}")
            return
        await self._act(f"serving with version policy {policy.kind}",
                        lambda name: load_with(self.store.server, name, policy))

    async def show_policy(self) -> None:
        """Set the policy controls to the selected model's current version policy."""
        name = self.model.value
        if not name:
            return
        try:
            config = await current_config(self.store.server, name)
        except Exception as exc:  # noqa: BLE001 - ParseError, ModelNotFound: shown, not raised
            self.show_error(user_text(exc))
            return
        policy = read_policy(config)

        def show() -> None:
            self.policy_kind.value = policy.kind
            self.num_versions.value = policy.num_versions
            self.versions.value = ", ".join(str(v) for v in policy.versions)
        self._in_document(show)

    def policy(self) -> VersionPolicy:
        """The policy the controls describe.

        Raises:
            ValueError: the specific versions are not a comma-separated list of integers.
        """
        kind = self.policy_kind.value
        if kind == "specific":
            try:
                versions = tuple(int(v) for v in (self.versions.value or "").replace(",", " ").split())
            except ValueError:
                raise ValueError(f"'{self.versions.value}' is not a list of version numbers") from None
            return VersionPolicy("specific", versions=versions)
        return VersionPolicy(kind, num_versions=self.num_versions.value or 1)

    # ----------------------------------------------------------------- helpers
    async def _act(self, done: str, call) -> None:
        name = self.model.value
        if not name:
            self.show_error("no model selected")
            return
        self._in_document(lambda: self._show_status(f"'{name}': working…"))
        succeeded = await self.store.attempt(lambda: _true_after(call(name)), self.show_error)
        if succeeded:
            self._in_document(lambda: self._show_status(f"'{name}' {done}"))
        await self.refresh()

    def _show_status(self, text: str) -> None:
        self.error.visible = False
        self.status.object, self.status.visible = text, True

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error pane (and hide the status)."""
        def show() -> None:
            self.status.visible = False
            self.error.object, self.error.visible = text, True
        self._in_document(show)

    def _in_document(self, change: Callable[[], None]) -> None:
        """Make ``change`` (to widgets, so to Bokeh models) under the session document's lock:
        in a next-tick callback of the document when it belongs to a server session (at once
        otherwise), with the document held so that Bokeh sends the changes itself, after the
        callback, over the session's write lock. (The table that stayed on READY after Unload
        in the Jupyter-hosted dashboard was Panel's queued writes losing a change, with this
        path too: corrected for every session by :mod:`workbench.ui.shared.panel_writes`.)"""
        doc = self._doc
        if doc is None or doc.session_context is None:
            change()
            return

        def locked() -> None:
            with set_curdoc(doc), pn.io.hold(doc):
                change()
        try:
            doc.add_next_tick_callback(locked)
        except Exception:  # noqa: BLE001 - the session is gone: nobody sees the change
            log.debug("dashboard session closed; a Models tab change was dropped")

    def _on_selection(self, event) -> None:
        if event.new and event.new[0] < len(self.table.value):
            self.model.value = self.table.value.iloc[event.new[0]]["model"]
        self._show_reason(event.new)

    def _show_reason(self, selection: list[int]) -> None:
        """The whole reason of the selected row (why it is not READY, a failed reload's error)
        under the table; hidden when the row has none."""
        frame = self.table.value
        if not (selection and selection[0] < len(frame)):
            self.reason.visible = False
            return
        row = frame.iloc[selection[0]]
        text = str(row["reason"])
        if text:
            self.reason.object = (
                '<div class="workbench-reason" style="background:#fff3cd;border:1px solid #ffe69c;'
                'border-radius:4px;padding:6px 10px;white-space:pre-wrap;overflow-wrap:anywhere">'
                f"<b>{html.escape(str(row['model']))} version {html.escape(str(row['version']))}</b>: "
                f"{html.escape(text)}</div>")
        self.reason.visible = bool(text)

    def _on_click(self, event) -> None:
        """A row's Config / Live button: select that model version, open the tab."""
        if event.column not in BUTTONS or event.row is None or event.row >= len(self.table.value):
            return
        row = self.table.value.iloc[event.row]
        self.store.selection.choose(row["model"], row["version"])
        self.model.value = row["model"]
        if self.open_tab is not None:
            self.open_tab(BUTTON_TABS[event.column])


def first_model(rows: list[ModelRow]) -> str:
    """The model a dashboard opens on: the first (by name) READY model that serves plain
    requests (not sequence-batched: each of its requests needs a sequence id and control
    flags), else the first READY model, else the first model; "" without rows."""
    ready = [row for row in rows if row.state == "READY"]
    plain = [row for row in ready if row.batching != "sequence"]
    chosen = min((row.name for row in plain or ready or rows), default="")
    return chosen


async def _true_after(awaitable) -> bool:
    await awaitable
    return True


def _frame(rows: list[ModelRow]):
    import pandas as pd

    records = [{
        "model": r.name, "version": r.version, "state": r.state, "backend": r.backend,
        "instances": r.instances, "max_batch_size": _number(r.max_batch_size),
        "batching": r.batching, "requests_per_s": _number(r.requests_per_s),
        "p99_ms": _number(r.p99_ms), "failures": _number(r.failures),
        "memory": float(r.memory_bytes) if r.memory else float("nan"), "reason": r.reason,
        "memory_text": r.memory_text, "memory_note": r.memory_note, **BUTTONS,
    } for r in rows]
    return pd.DataFrame(records, columns=[*COLUMNS, *HIDDEN])


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


__all__ = ["BUTTONS", "BUTTON_ICONS", "COLUMNS", "ModelsView", "first_model"]
