"""The Config tab: ``config.pbtxt`` in a code editor with live validation, form controls for
the common knobs, a diff against the file on disk, Apply and Revert.

- Validation: each edit restarts a timer (:data:`DEBOUNCE_S`, s); then the engine's
  ``validate_model_config_text`` runs and its problems become editor annotations and a list.
- Form: :mod:`workbench.config_edits.knobs` rewrites only the values touched; a text edit
  moves the form; refused while the text has a syntax error; knobs that do not apply are
  disabled with the reason (:mod:`workbench.ui.config.config_form`).
- One editor per model opened (its own undo history); switching with edits asks first.
- Apply: ``write_model_config`` with the version of the file the text was read from (a
  changed file refuses it; the tab offers to keep the edits on the new file); Revert:
  ``revert_model_config``, once per backup. Banners replace each other; errors in words
  (:func:`~workbench.ui.shared.store.user_text`).
- Attached to a server by URL (``store.remote``): the text is the served config, Apply is a
  load with its ``config`` override there (no file written), no Revert.
- :meth:`ConfigView.tick` (the dashboard's beat) reopens a file changed on disk when the
  editor holds no edits, else says it changed.

What a person sees, and the texts: docs/dashboard.md (**Config**) and docs/attach.md (Config)."""

from __future__ import annotations

import asyncio
import difflib

import panel as pn
from google.protobuf import text_format

from workbench import ConfigProblem
from workbench.common.results import ConfigFile, ConfigWriteResult
from workbench.config_edits.knobs import knob_reasons, parse_text, read_knobs, set_knobs
from workbench.ui.config.config_form import FORM_WIDTH, KnobForm
from workbench.ui.shared.ace_theme import EDITOR_THEME
from workbench.ui.shared.config_results import result_text
from workbench.ui.shared.store import AlertKind, EngineStore, Spawned, user_text

#: seconds of quiet typing before the text is validated
DEBOUNCE_S = 0.4
#: Apply's tooltip while the text has problems
#: the text area's height in px; the editor box is :data:`SCROLLBAR_PX` taller
EDITOR_PX = 420
#: the room under the text area for Ace's horizontal scrollbar (a 20 px box: Ace draws it
#: ``(measured width or 15) + 5`` px tall)
SCROLLBAR_PX = 20
#: the editor's line height in px, set in :data:`EDITOR_CSS` (Ace measures it from the
#: editor's font: "normal" varied with the machine's monospace font), so that the text area
#: shows :data:`ROWS_SHOWN` lines at a time on every machine
LINE_PX = 16
#: lines the text area shows at once
ROWS_SHOWN = EDITOR_PX // LINE_PX
#: Ace measures the page's scrollbar width once (0 with overlay or hidden scrollbars: macOS,
#: headless Chromium) and leaves that much room for its horizontal scrollbar, but draws the
#: bar 20 px tall: a long line's bar then lay over the last line, which no scrolling reached.
#: The editor (Ace's container) stops :data:`SCROLLBAR_PX` above the box's bottom and the bar
#: hangs into that room, under the text area, whatever Ace measured.
EDITOR_CSS = f"""
.ace_editor {{ height: calc(100% - {SCROLLBAR_PX}px) !important; overflow: visible !important;
               line-height: {LINE_PX}px !important; }}
.ace_scrollbar-h {{ bottom: -{SCROLLBAR_PX}px !important; height: {SCROLLBAR_PX}px !important; }}
"""
FIX_FIRST = "fix the problems listed under the editor first"
#: Revert's tooltip while there is no backup
NO_BACKUP = "no backup to revert to: Apply keeps the file it replaces as one"


def line_count_text(text: str) -> str:
    """The line under the editor: ``"31 lines: 26 in view, scroll the editor for the rest"``
    past :data:`ROWS_SHOWN` lines, else ``"13 lines"`` (a final newline ends the last line)."""
    lines = len(text.splitlines()) or 1
    count = f"{lines} line{'s' if lines != 1 else ''}"
    rows = text.count("\n") + 1  # Ace's rows: an empty one after a final newline
    return count if rows <= ROWS_SHOWN else f"{count}: {ROWS_SHOWN} in view, scroll the editor for the rest"


class ConfigView(pn.viewable.Viewer):
    """The Config tab of one dashboard session. :meth:`open`, :meth:`validate`,
    :meth:`apply` and :meth:`revert` are coroutines the widgets spawn on the engine's loop."""

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        #: the open model, its file, the text read from it and that file's version
        self.model_name = self.path = self.disk_text = self.version = ""
        #: the file as it changed on disk since it was opened (while the editor holds edits)
        self.disk_now: ConfigFile | None = None
        #: the model chosen while the editor held edits (the prompt asks about it)
        self.pending = ""
        self.problems: list[ConfigProblem] = []
        self._validation: Spawned | None = None
        self._following: Spawned | None = None
        self._syncing = False
        self.writable = True
        self.read_only_reason = ""
        self.backup_exists = False
        #: attached to a server by URL: Apply loads the model there with a config override
        #: (nothing is written to a file, there is no backup: no Revert)
        self.attached = store.remote.label if store.remote is not None else ""
        #: the knobs the model is served with now (effective values)
        self.served = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.model = pn.widgets.Select(label="Model", options=[])
        self.editor = self._new_editor("")
        #: holds the open model's editor (replaced by another model's, see :meth:`open`)
        #: the text's line count under the editor, and that it continues past the text area
        #: when it is longer (a new user took a 31-line file's 26 lines shown for all of it:
        #: with overlay scrollbars, Ace's vertical bar shows only while scrolling)
        self.line_count = pn.pane.HTML(line_count_text(""), sizing_mode="stretch_width",
                                       css_classes=["workbench-config-lines"],
                                       styles={"color": "#555", "font-size": "0.9em"})
        self.editor_box = pn.Column(self.editor, self.line_count, sizing_mode="stretch_width")
        self.problem_list = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.diff = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.form = KnobForm()
        self.apply_button = pn.widgets.Button(
            label="Apply (load with config override)" if self.attached else "Apply (write + reload)",
            color="primary")
        self.revert_button = pn.widgets.Button(label="Revert to backup", disabled=True,
                                               description=NO_BACKUP, visible=not self.attached)
        self.diff_heading = pn.pane.Markdown(
            "**Edits against the served config** (applied as a load override; no file is written)"
            if self.attached else "**Diff against the file on disk**", sizing_mode="stretch_width")
        self.discard_button = pn.widgets.Button(label="Discard edits")
        self.status = pn.pane.Alert("", alert_type="success", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.keep_new_button = pn.widgets.Button(label="Keep my edits on the new file", visible=False)
        # the unsaved-edits prompt
        self.question = pn.pane.Alert("", alert_type="warning")
        self.keep_button = pn.widgets.Button(label="Keep editing")
        self.switch_button = pn.widgets.Button(label="Discard edits and switch", color="danger")
        self.prompt = pn.Column(self.question, pn.Row(self.keep_button, self.switch_button),
                                visible=False, sizing_mode="stretch_width")
        self._wire()

    def _wire(self) -> None:
        self.model.param.watch(self._on_model, "value")
        for widget in self.form.widgets():
            widget.param.watch(self._on_form, "value")
        self.apply_button.on_click(self.store.starter(self.apply))
        self.revert_button.on_click(self.store.starter(self.revert))
        self.discard_button.on_click(lambda _e: setattr(self.editor, "value", self.disk_text))
        self.keep_new_button.on_click(lambda _e: self.keep_edits_on_new_file())
        self.keep_button.on_click(lambda _e: self.keep_editing())
        self.switch_button.on_click(lambda _e: self.discard_and_switch())
        self.store.selection.bind(self.model)  # opens on the session's selected model

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.Row(self.model, self.apply_button, self.revert_button, self.discard_button),
            self.prompt, self.error, self.status, self.keep_new_button,
            pn.Row(pn.Column(self.editor_box, self.problem_list, sizing_mode="stretch_width"),
                   pn.Column(pn.pane.Markdown("**Knobs**"), *self.form.widgets(),
                             self.form.not_applicable, self.served, width=FORM_WIDTH + 20)),
            self.diff_heading, self.diff,
            sizing_mode="stretch_width", css_classes=["workbench-config"])

    def has_edits(self) -> bool:
        """The editor holds text that is not the open model's file as read."""
        return bool(self.model_name) and self.editor.value != self.disk_text

    # ----------------------------------------------------------------- engine calls
    async def refresh_models(self) -> None:
        """List the repository's models (and open the first when none is open)."""
        index = await self.store.attempt(self.store.server.repository_index, self.show_error,
                                         user_text)
        if index is None:
            return
        names = sorted({row["name"] for row in index})
        self.model.options = names
        if names and self.model.value not in names:
            self.model.value = names[0]  # the watcher opens it
        elif names and not self.model_name:
            await self.open(self.model.value)

    async def open(self, name: str) -> None:
        """Load ``name``'s config file into the editor: another model's in an editor of its
        own (a fresh undo history), the open model's again in place (its edits stay in the
        browser's undo history)."""
        if not name:
            return
        described = await self.store.attempt(
            lambda: self.store.server.config_files.model_config_file(name), self.show_error, user_text)
        if described is None or name != self.model.value:
            return  # the selection moved on meanwhile: that model's open shows it
        another = name != self.model_name
        self.model_name, self.path = name, described["path"]
        self.disk_text, self.version = described["text"], described["version"]
        self.pending, self.disk_now = "", None
        self.prompt.visible = self.keep_new_button.visible = False
        self.error.visible = self.status.visible = False
        self.writable, self.read_only_reason = described["writable"], described["reason"]
        self.backup_exists = described["backup_exists"]
        self._enable_buttons()
        if not described["writable"]:
            self.show_error(f"read only: {described['reason']}")
        if another:
            self._replace_editor(described["text"])
        else:
            self.editor.value = described["text"]
        self._update_diff()  # also when the text did not change (no watcher call then)
        self._update_form(described["text"])
        await self.show_served()
        await self.validate()

    async def show_served(self) -> None:
        """Show the knobs the open model is served with now (the engine's completed config),
        or that it is not served."""
        name = self.model_name
        try:
            knobs = read_knobs(await self.store.server.model_config(name))
        except Exception:  # noqa: BLE001 - not loaded: said in place
            text, placeholder = f"*Served now: {name} is not loaded.*", "empty"
        else:
            preferred = ", ".join(str(s) for s in knobs.preferred_batch_sizes) or "none"
            text = (f"**Served now** (effective values): max_batch_size {knobs.max_batch_size}; "
                    f"dynamic batching {'on' if knobs.dynamic_batching else 'off'}; preferred batch "
                    f"sizes {preferred}; max queue delay {knobs.max_queue_delay_us} µs; "
                    f"{knobs.instance_count} × {knobs.instance_kind}")
            placeholder = f"empty: served as {preferred}" if knobs.preferred_batch_sizes else "empty: none"
        if name == self.model_name:
            self.served.object, self.form.preferred.placeholder = text, placeholder

    def tick(self) -> None:
        """The dashboard's beat: check the open file on disk (see the module docstring),
        unless the last check is still running."""
        if self.model_name and (self._following is None or self._following.done()):
            self._following = self.store.spawn(self.follow_disk())

    async def follow_disk(self) -> None:
        """Reopen the file when it changed on disk and the editor holds no edits; with
        edits, say that it changed (once per change) and offer to keep them on it."""
        name = self.model_name
        try:
            described = await self.store.server.config_files.model_config_file(name)
        except Exception:  # noqa: BLE001 - folder gone: the next open says so
            return
        if name != self.model_name or described["version"] == self.version:
            return
        if not self.has_edits():
            await self.open(name)
            self._say("info", f"{self.path} changed on disk (Tuning's Apply best, another tab or an "
                              "editor): the editor shows it now")
        elif self.disk_now is None or self.disk_now["version"] != described["version"]:
            self.disk_now = described
            self.keep_new_button.visible = True
            self._say("warning", f"{self.path} changed on disk since it was opened: Apply is refused "
                                 "so as not to write over that change. Discard edits to see it, or "
                                 "keep your edits on the new file (then Apply writes them over it)")

    def keep_edits_on_new_file(self) -> None:
        """Take the file as it changed on disk as the base of the editor's text: the diff
        shows the edits against it, and Apply writes them over it."""
        now = self.disk_now
        if now is None:
            return
        self.disk_text, self.version, self.disk_now = now["text"], now["version"], None
        self.backup_exists = now["backup_exists"]
        self.keep_new_button.visible = self.error.visible = False
        self._enable_buttons()
        self._update_diff()
        self._say("info", f"the diff is against {self.path} as it is on disk now; Apply writes "
                          "your text over it")

    async def validate(self, text: str | None = None) -> list[ConfigProblem]:
        """Validate ``text`` (default: the editor's) and show the problems, unless the editor
        moved on meanwhile."""
        text = self.editor.value if text is None else text
        name = self.model_name
        problems = await self.store.attempt(
            lambda: self.store.server.config_files.validate_model_config_text(name, text), self.show_error,
            user_text)
        if problems is not None and text == self.editor.value and name == self.model_name:
            self._show_problems(problems)
        return problems or []

    async def apply(self) -> None:
        """Write the editor's text into the open model's file (validated, atomic, with
        backup, refused when the file changed since it was read) and hot-reload the model."""
        name, text, version = self.model_name, self.editor.value, self.version
        if self.pending:
            return  # the buttons are disabled until the prompt is answered
        self.error.visible = self.status.visible = False
        result = await self.store.attempt(
            lambda: self.store.server.config_files.write_model_config(
                name, text, expected_version=version), self.show_error, user_text)
        if result is None:
            await self.follow_disk()  # a refused stale write: offer to keep the edits on it
            return
        if name != self.model_name:
            return
        if not result["kept"]:  # the reload failed: the file that served before is back
            await self._reread()
            self._show_result(f"not kept {result['path']}", result)
            return
        if self.attached:  # nothing written here: say what the server did
            self.error.visible = False
            self._say("success", f"loaded {name} on {self.attached} with this config as an override "
                                 "(the server's config.pbtxt is unchanged: a plain load reads it again)")
        else:
            self._show_result(f"written {result['path']}", result)
        self.disk_text, self.version = text, result["version"]
        self.backup_exists = result["backup"] is not None
        self._enable_buttons()
        self._update_diff()
        await self.show_served()

    async def _reread(self) -> None:
        """Take the open model's file as it is on disk now as the base of the editor's text
        (the text stays: edits against it)."""
        name = self.model_name
        described = await self.store.attempt(
            lambda: self.store.server.config_files.model_config_file(name), self.show_error, user_text)
        if described is None or name != self.model_name:
            return
        self.disk_text, self.version = described["text"], described["version"]
        self.backup_exists = described["backup_exists"]
        self._enable_buttons()
        self._update_diff()
        await self.show_served()

    async def revert(self) -> None:
        """Put ``config.pbtxt.bak`` back (once), apply it, and reopen the file."""
        name = self.model_name
        if self.pending:
            return
        self.error.visible = self.status.visible = False
        result = await self.store.attempt(
            lambda: self.store.server.config_files.revert_model_config(
                name, expected_version=self.version), self.show_error, user_text)
        if result is None:
            await self.follow_disk()
            return
        await self.open(name)
        self._show_result(f"restored {result['path']} from {result['restored_from']}", result)

    # ----------------------------------------------------------------- the prompt
    def _on_model(self, event) -> None:
        name = event.new
        if not name:
            return
        if name == self.model_name:  # back on the open model (Keep editing)
            self.pending, self.prompt.visible = "", False
            self._enable_buttons()
        elif self.has_edits():
            self._ask(name)
        else:
            self.store.spawn(self.open(name))

    def _ask(self, name: str) -> None:
        """Ask whether to drop the open model's edits to open ``name``."""
        self.pending, current = name, self.model_name
        self.question.object = (f"{current} has unsaved edits. Keep editing {current}, or discard "
                                f"the edits and open {name}?")
        self.keep_button.label = f"Keep editing {current}"
        self.switch_button.label = f"Discard edits, open {name}"
        self.prompt.visible = True
        self._enable_buttons()

    def keep_editing(self) -> None:
        """The prompt's Keep: the dropdown goes back to the open model, the edits stay."""
        self.model.value = self.model_name  # the watcher closes the prompt

    def discard_and_switch(self) -> None:
        """The prompt's Discard: the edits are dropped and the chosen model opens."""
        if self.pending:
            name, self.pending, self.prompt.visible = self.pending, "", False
            self.store.spawn(self.open(name))

    # ----------------------------------------------------------------- reactions
    def _new_editor(self, text: str) -> pn.widgets.CodeEditor:
        editor = pn.widgets.CodeEditor(value=text, language="text", theme=EDITOR_THEME,
                                       height=EDITOR_PX + SCROLLBAR_PX,
                                       sizing_mode="stretch_width", label="config.pbtxt",
                                       stylesheets=[EDITOR_CSS],
                                       css_classes=["workbench-config-editor"])
        editor.param.watch(self._on_text, "value")
        return editor

    def _replace_editor(self, text: str) -> None:
        """Show ``text`` in a new editor: the browser's undo history starts at it."""
        self.editor = self._new_editor(text)
        self.editor_box.objects = [self.editor, self.line_count]
        self.line_count.object = line_count_text(text)

    def _on_text(self, event) -> None:
        if event.obj is not self.editor:
            return  # a late change of an editor replaced since (another model's)
        self.line_count.object = line_count_text(event.new)
        if event.new != self.disk_text:  # an edit: the last action's banners are about the past
            self.status.visible = False
            if self.writable:
                self.error.visible = False
        self._update_diff()
        self._update_form(event.new)
        if self._validation is not None and not self._validation.done():
            self._validation.cancel()
        self._validation = self.store.spawn(self._validate_later(event.new))

    async def _validate_later(self, text: str) -> None:
        await asyncio.sleep(DEBOUNCE_S)
        await self.validate(text)

    def _on_form(self, _event) -> None:
        if self._syncing:
            return
        try:
            knobs = self.form.knobs()
            self.editor.value = set_knobs(self.editor.value, knobs)
        except text_format.ParseError as exc:
            self.show_error(f"fix the syntax error before using the form: {exc}")
        except ValueError as exc:
            self.show_error(str(exc))

    def _update_form(self, text: str) -> None:
        try:
            config = parse_text(text)
        except text_format.ParseError:
            return
        self._syncing = True
        try:
            self.form.show(read_knobs(config), knob_reasons(config))
        finally:
            self._syncing = False

    def _update_diff(self) -> None:
        base = f"{self.path} (served)" if self.attached else f"{self.path} (on disk)"
        lines = difflib.unified_diff(self.disk_text.splitlines(), self.editor.value.splitlines(),
                                     base, "editor", lineterm="")
        text = "\n".join(lines)
        self.diff.object = f"```diff\n{text}\n```" if text else "*No changes.*"

    def _show_problems(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        self.editor.annotations = [
            {"row": (p.line or 1) - 1, "column": (p.column or 1) - 1, "text": p.message,
             "type": "error"} for p in problems]
        self.problem_list.object = "\n".join(
            f"- {_where(p)} ({p.kind}): {p.message}" for p in problems) or "✓ valid"
        self._enable_buttons()

    def _enable_buttons(self) -> None:
        """Apply runs only on a writable file and a text without problems, Revert only where
        there is a backup, and neither while the unsaved-edits prompt waits; their tooltips
        say why not."""
        waiting = f"keep or discard the edits of {self.model_name} first" if self.pending else None
        self.apply_button.disabled = not self.writable or bool(self.problems) or bool(waiting)
        self.apply_button.description = (
            f"read only: {self.read_only_reason}" if not self.writable
            else waiting or (FIX_FIRST if self.problems else None))
        self.revert_button.disabled = not (self.writable and self.backup_exists) or bool(waiting)
        self.revert_button.description = (
            None if not self.revert_button.disabled
            else waiting or (f"read only: {self.read_only_reason}" if not self.writable else NO_BACKUP))

    def _say(self, kind: AlertKind, text: str) -> None:
        self.status.alert_type, self.status.object, self.status.visible = kind, text, True

    def _show_result(self, what: str, result: ConfigWriteResult) -> None:
        self.error.visible = False
        self.status.object, self.status.alert_type = result_text(what, result, "your text stays in the editor")
        self.status.visible = True

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error pane (and hide the status)."""
        self.status.visible = False
        self.error.object, self.error.visible = text, True


def _where(problem: ConfigProblem) -> str:
    if problem.line is None:
        return "(no line)"
    return f"line {problem.line}" + (f", column {problem.column}" if problem.column else "")


__all__ = ["DEBOUNCE_S", "FIX_FIRST", "NO_BACKUP", "ROWS_SHOWN", "ConfigView", "line_count_text"]
