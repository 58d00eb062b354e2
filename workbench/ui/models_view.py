"""The Models tab: every model and version with state, reason and memory; load, unload and
reload; a version policy to try.

Model control needs ``--model-control-mode explicit``; in another mode the engine refuses
load and unload, and its message ("explicit model load / unload is not allowed if polling is
enabled") is shown in the tab's error pane, as every failure is: never a traceback.

Version policy: applied as a load of the model with a config override (its current config
with ``version_policy`` replaced, :mod:`workbench.ui.overrides`). The file is not written; a
later Reload reads ``config.pbtxt`` again (Triton's load API behaves the same). To keep a
policy, edit ``version_policy`` in the Config tab.
"""

from __future__ import annotations

import panel as pn

from workbench.ui.model_rows import ModelRow, model_rows
from workbench.ui.overrides import POLICY_KINDS, VersionPolicy, current_config, load_with, read_policy
from workbench.ui.store import EngineStore, error_text

#: table columns, in order
COLUMNS = ("model", "version", "state", "reason", "memory")


class ModelsView(pn.viewable.Viewer):
    """The Models tab of one dashboard session; every action is also a coroutine method
    (:meth:`load`, :meth:`unload`, :meth:`reload`, :meth:`apply_policy`, :meth:`refresh`)
    that the buttons spawn on the engine's loop."""

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.rows: list[ModelRow] = []
        self.table = pn.widgets.Tabulator(
            _frame([]), disabled=True, show_index=False, selectable=1, max_height=560,
            sizing_mode="stretch_width", label="models")
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
            button.on_click(lambda _event, action=action: self.store.spawn(action()))
        self.table.param.watch(self._on_selection, "selection")
        self.model.param.watch(lambda _e: self.store.spawn(self.show_policy()), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        policy = pn.Row(self.policy_kind, self.num_versions, self.versions, self.policy_button)
        return pn.Column(
            pn.Row(self.model, self.load_button, self.unload_button, self.reload_button,
                   self.refresh_button),
            self.error, self.status, self.table,
            pn.pane.Markdown("**Version policy** (tried with a config override; the file is "
                             "not written)"),
            policy, sizing_mode="stretch_width")

    # ----------------------------------------------------------------- actions
    async def refresh(self) -> None:
        """Re-read the repository index and memory usage into the table."""
        rows = await self.store.attempt(lambda: model_rows(self.store.server), self.show_error)
        if rows is None:
            return
        self.rows = rows
        self.table.value = _frame(rows)
        names = sorted({row.name for row in rows})
        current = self.model.value
        self.model.options = names
        if current not in names and names:
            self.model.value = names[0]

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
            self.show_error(error_text(exc))
            return
        policy = read_policy(config)
        self.policy_kind.value = policy.kind
        self.num_versions.value = policy.num_versions
        self.versions.value = ", ".join(str(v) for v in policy.versions)

    def policy(self) -> VersionPolicy:
        """The policy the controls describe.

        Raises:
            ValueError: the specific versions are not a comma-separated list of integers.
        """
        kind = self.policy_kind.value
        if kind == "specific":
            try:
                versions = tuple(int(v) for v in self.versions.value.replace(",", " ").split())
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
        self.error.visible = False
        self.status.object, self.status.visible = f"'{name}': working…", True
        succeeded = await self.store.attempt(lambda: _true_after(call(name)), self.show_error)
        self.status.visible = bool(succeeded)
        if succeeded:
            self.status.object = f"'{name}' {done}"
        await self.refresh()

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error pane (and hide the status)."""
        self.status.visible = False
        self.error.object, self.error.visible = text, True

    def _on_selection(self, event) -> None:
        if event.new and event.new[0] < len(self.rows):
            self.model.value = self.rows[event.new[0]].name


async def _true_after(awaitable) -> bool:
    await awaitable
    return True


def _frame(rows: list[ModelRow]):
    import pandas as pd

    return pd.DataFrame([(r.name, r.version, r.state, r.reason, r.memory) for r in rows],
                        columns=list(COLUMNS))


__all__ = ["COLUMNS", "ModelsView"]
