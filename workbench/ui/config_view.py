"""The Config tab: ``config.pbtxt`` in a code editor with live validation, form controls for
the common knobs, a diff against the file on disk, Apply and Revert.

* Validation: each edit (re)starts a short timer (:data:`DEBOUNCE_S`); when it fires the
  engine validates the text as loading would (``validate_model_config_text``), and the
  problems become editor annotations on their lines and a list under the editor.
* Form: max batch size, dynamic batching, preferred batch sizes, max queue delay (µs),
  priority levels, instance count and kind, response cache. A change rewrites only the
  fields it touches in the text (:mod:`workbench.ui.config_knobs`); an edit of the text moves
  the form to match. The form is refused while the text has a syntax error.
* Apply: ``write_model_config`` (validated atomic write keeping ``config.pbtxt.bak``, then a
  hot reload in explicit mode without dropped requests); the result or the error is shown.
  Revert: ``revert_model_config`` (the backup goes back, and is applied).
* Banners: each action (an edit, Apply, Revert, another model) replaces the last one's; Apply
  is disabled while the text has problems (its tooltip says so), and errors are shown in
  words without Python exception names (:func:`~workbench.ui.store.user_text`).
* Effective values: beside the form, the knobs the model is served with now (the engine's
  completed config: e.g. an empty ``preferred_batch_size`` is served as ``[max_batch_size]``).
* Following the disk: :meth:`ConfigView.tick` (the dashboard's beat) reopens the file when it
  changed on disk (Tuning's Apply best, another tab, an editor) and the editor holds no
  edits; with edits, it says the file changed instead.
"""

from __future__ import annotations

import asyncio
import difflib

import panel as pn
from google.protobuf import text_format

from workbench import ConfigProblem
from workbench.ui.config_knobs import INSTANCE_KINDS, ConfigKnobs, parse_text, read_knobs, set_knobs
from workbench.ui.store import AlertKind, EngineStore, Spawned, user_text

#: seconds of quiet typing before the text is validated
DEBOUNCE_S = 0.4
#: width of the knob widgets, pixels
FORM_WIDTH = 240
#: Apply's tooltip while the text has problems
FIX_FIRST = "fix the problems listed under the editor first"


class ConfigView(pn.viewable.Viewer):
    """The Config tab of one dashboard session. :meth:`open`, :meth:`validate`,
    :meth:`apply` and :meth:`revert` are coroutines the widgets spawn on the engine's loop."""

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.model_name = ""
        self.disk_text = ""
        self._changed_on_disk = ""
        self.path = ""
        self.problems: list[ConfigProblem] = []
        self._validation: Spawned | None = None
        self._following: Spawned | None = None
        self._syncing = False
        self.writable = True
        self.read_only_reason = ""
        #: the knobs the model is served with now (effective values)
        self.served = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.model = pn.widgets.Select(label="Model", options=[])
        self.editor = pn.widgets.CodeEditor(value="", language="text", height=420,
                                            sizing_mode="stretch_width", label="config.pbtxt")
        self.problem_list = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.diff = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.form = _Form()
        self.apply_button = pn.widgets.Button(label="Apply (write + reload)", color="primary")
        self.revert_button = pn.widgets.Button(label="Revert to backup")
        self.discard_button = pn.widgets.Button(label="Discard edits")
        self.status = pn.pane.Alert("", alert_type="success", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self._wire()

    def _wire(self) -> None:
        self.model.param.watch(lambda e: self.store.spawn(self.open(e.new)), "value")
        self.editor.param.watch(self._on_text, "value")
        for widget in self.form.widgets():
            widget.param.watch(self._on_form, "value")
        self.apply_button.on_click(self.store.starter(self.apply))
        self.revert_button.on_click(self.store.starter(self.revert))
        self.discard_button.on_click(lambda _e: setattr(self.editor, "value", self.disk_text))
        self.store.selection.bind(self.model)  # opens on the session's selected model

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.Row(self.model, self.apply_button, self.revert_button, self.discard_button),
            self.error, self.status,
            pn.Row(pn.Column(self.editor, self.problem_list, sizing_mode="stretch_width"),
                   pn.Column(pn.pane.Markdown("**Knobs**"), *self.form.widgets(), self.served,
                             width=FORM_WIDTH + 20)),
            pn.pane.Markdown("**Diff against the file on disk**"), self.diff,
            sizing_mode="stretch_width")

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
        """Load ``name``'s config file into the editor (edits of another model are dropped)."""
        if not name:
            return
        described = await self.store.attempt(
            lambda: self.store.server.config_files.model_config_file(name), self.show_error, user_text)
        if described is None or name != self.model.value:
            return  # the selection moved on meanwhile: that model's open shows it
        self.model_name, self.path, self.disk_text = name, described["path"], described["text"]
        self.error.visible = self.status.visible = False
        self.writable, self.read_only_reason = described["writable"], described["reason"]
        self._enable_apply()
        self.revert_button.disabled = not (described["writable"] and described["backup_exists"])
        if not described["writable"]:
            self.show_error(f"read only: {described['reason']}")
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
        edits, say that it changed (once per change)."""
        name = self.model_name
        try:
            described = await self.store.server.config_files.model_config_file(name)
        except Exception:  # noqa: BLE001 - folder gone: the next open says so
            return
        if name != self.model_name or described["text"] == self.disk_text:
            return
        if self.editor.value == self.disk_text:
            await self.open(name)
            self._say("info", f"{self.path} changed on disk (Tuning's Apply best, another tab or an "
                              "editor): the editor shows it now")
        elif self._changed_on_disk != described["text"]:
            self._changed_on_disk = described["text"]
            self._say("warning", f"{self.path} changed on disk since it was opened: Discard edits "
                                 "to see it, or Apply to write over it")

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
        """Write the editor's text (validated, atomic, with backup) and hot-reload the model."""
        name, text = self.model_name, self.editor.value
        self.error.visible = self.status.visible = False
        result = await self.store.attempt(
            lambda: self.store.server.config_files.write_model_config(name, text), self.show_error, user_text)
        if result is not None:
            self._show_result("written", result)
            self.disk_text = text
            self.revert_button.disabled = result["backup"] is None
            self._update_diff()
            await self.show_served()

    async def revert(self) -> None:
        """Put ``config.pbtxt.bak`` back, apply it, and reopen the file."""
        name = self.model_name
        self.error.visible = self.status.visible = False
        result = await self.store.attempt(
            lambda: self.store.server.config_files.revert_model_config(name), self.show_error, user_text)
        if result is not None:
            await self.open(name)
            self._show_result("reverted to the backup", result)

    # ----------------------------------------------------------------- reactions
    def _on_text(self, event) -> None:
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
            knobs = read_knobs(parse_text(text))
        except text_format.ParseError:
            return
        self._syncing = True
        try:
            self.form.show(knobs)
        finally:
            self._syncing = False

    def _update_diff(self) -> None:
        lines = difflib.unified_diff(self.disk_text.splitlines(), self.editor.value.splitlines(),
                                     f"{self.path} (on disk)", "editor", lineterm="")
        text = "\n".join(lines)
        self.diff.object = f"```diff\n{text}\n```" if text else "*No changes.*"

    def _show_problems(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        self.editor.annotations = [
            {"row": (p.line or 1) - 1, "column": (p.column or 1) - 1, "text": p.message,
             "type": "error"} for p in problems]
        self.problem_list.object = "\n".join(
            f"- {_where(p)} ({p.kind}): {p.message}" for p in problems) or "✓ valid"
        self._enable_apply()

    def _enable_apply(self) -> None:
        """Apply runs only on a writable file and a text without problems; its tooltip says
        why not."""
        self.apply_button.disabled = not self.writable or bool(self.problems)
        self.apply_button.description = (
            f"read only: {self.read_only_reason}" if not self.writable
            else FIX_FIRST if self.problems else None)

    def _say(self, kind: AlertKind, text: str) -> None:
        self.status.alert_type, self.status.object, self.status.visible = kind, text, True

    def _show_result(self, what: str, result: dict) -> None:
        self.error.visible = False
        backup = f"; previous file kept as {result['backup']}" if result["backup"] else ""
        if result["reloaded"]:
            self.status.alert_type, text = "success", f"{what} {result['path']}{backup}; reloaded"
        else:
            self.status.alert_type = "warning"
            text = f"{what} {result['path']}{backup}; not reloaded: {result['reason']}"
        self.status.object, self.status.visible = text, True

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error pane (and hide the status)."""
        self.status.visible = False
        self.error.object, self.error.visible = text, True


def _where(problem: ConfigProblem) -> str:
    if problem.line is None:
        return "(no line)"
    return f"line {problem.line}" + (f", column {problem.column}" if problem.column else "")


class _Form:
    """The knob widgets."""

    def __init__(self) -> None:
        width = {"width": FORM_WIDTH}
        self.max_batch_size = pn.widgets.IntInput(label="max_batch_size", start=0, **width)
        self.dynamic_batching = pn.widgets.Checkbox(label="dynamic batching", **width)
        self.preferred = pn.widgets.TextInput(label="preferred batch sizes", placeholder="empty",
                                              **width)
        self.delay = pn.widgets.IntInput(label="max queue delay (µs)", start=0, step=100, **width)
        self.priorities = pn.widgets.IntInput(label="priority levels", start=0, **width)
        self.count = pn.widgets.IntInput(label="instance count", start=1, value=1, **width)
        self.kind = pn.widgets.Select(label="instance kind", options=list(INSTANCE_KINDS), **width)
        self.cache = pn.widgets.Checkbox(label="response cache", **width)

    def widgets(self) -> list:
        return [self.max_batch_size, self.dynamic_batching, self.preferred, self.delay,
                self.priorities, self.count, self.kind, self.cache]

    def knobs(self) -> ConfigKnobs:
        """Raises:
            ValueError: preferred batch sizes are not positive integers."""
        try:
            preferred = tuple(int(v) for v in (self.preferred.value or "").replace(",", " ").split())
        except ValueError:
            raise ValueError(f"preferred batch sizes '{self.preferred.value}' are not "
                             "integers") from None
        if any(size < 1 for size in preferred):
            raise ValueError("preferred batch sizes must be at least 1")
        return ConfigKnobs(
            max_batch_size=self.max_batch_size.value or 0, dynamic_batching=self.dynamic_batching.value,
            preferred_batch_sizes=preferred, max_queue_delay_us=self.delay.value or 0,
            priority_levels=self.priorities.value or 0, instance_count=self.count.value or 1,
            instance_kind=self.kind.value, response_cache=self.cache.value)

    def show(self, knobs: ConfigKnobs) -> None:
        self.max_batch_size.value = knobs.max_batch_size
        self.dynamic_batching.value = knobs.dynamic_batching
        self.preferred.value = ", ".join(str(s) for s in knobs.preferred_batch_sizes)
        self.delay.value = knobs.max_queue_delay_us
        self.priorities.value = knobs.priority_levels
        self.count.value = knobs.instance_count
        self.kind.value = knobs.instance_kind
        self.cache.value = knobs.response_cache


__all__ = ["DEBOUNCE_S", "ConfigView"]
