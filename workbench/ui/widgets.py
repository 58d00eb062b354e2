"""Notebook controls (ipywidgets) for tuning a model in plain Python.

:class:`ModelControls` shows a dropdown of model versions, sliders for the dynamic batcher's
max queue delay (µs) and preferred batch size, and Load / Unload buttons. Each control calls
the engine as the dashboard does: the sliders reload the model with its current config
changed (a load with a config override: the file is not written, see
:mod:`workbench.config_edits.overrides`), the buttons load and unload. The same calls are coroutine
methods, so a tuning loop needs no widget at all::

    controls = ModelControls(server)
    await controls.refresh()
    controls                                   # the widgets, in a notebook cell
    for delay_us in (0, 100, 500, 2000):
        await controls.apply(max_queue_delay_us=delay_us)
        ...                                    # measure, e.g. with workbench perf

or, with widgets driven from code: ``controls.max_queue_delay.value = 500`` then
``await controls.settle()``. A slider whose knob does not apply to the selected model (the
dynamic batcher's on a sequence-batched model whose strategy has no such field,
:func:`~workbench.config_edits.knobs.knob_reasons`) is disabled, with the reason as its
tooltip and in the status line; ``apply`` of such a knob is refused with the reason. Build
it on the engine's loop (a notebook cell that started the engine); slider changes made
elsewhere are handed to that loop.
"""

from __future__ import annotations

import asyncio
from html import escape
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from workbench import Server
from workbench.config_edits.knobs import KnobValues, knob_reasons, read_knobs
from workbench.config_edits.overrides import current_config, load_with
from workbench.ui.shared.store import EngineStore, user_text

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: the max queue delay slider's range, microseconds
MAX_QUEUE_DELAY_RANGE_US = (0, 20_000)


class ModelControls:
    """ipywidgets controls bound to one model of ``server``.

    Args:
        server: the started engine (explicit model control mode for loads and unloads).
        loop: the engine's loop (default: the running loop).
    """

    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = EngineStore(server, loop)
        self._syncing = False
        self.model = w.Dropdown(description="Model", options=[])
        low, high = MAX_QUEUE_DELAY_RANGE_US
        self.max_queue_delay = w.IntSlider(description="max queue delay (µs)", min=low, max=high,
                                           step=100, continuous_update=False)
        self.preferred_batch_size = w.IntSlider(description="preferred batch (0: none)", min=0,
                                                max=64, continuous_update=False)
        self.load_button = w.Button(description="Load", button_style="primary")
        self.unload_button = w.Button(description="Unload", button_style="warning")
        self.status = w.HTML("")
        self.widget = w.VBox([self.model, self.max_queue_delay, self.preferred_batch_size,
                              w.HBox([self.load_button, self.unload_button]), self.status])
        self.max_queue_delay.observe(self._on_knob, "value")
        self.preferred_batch_size.observe(self._on_knob, "value")
        self.model.observe(lambda _change: self._spawn(self.show_config()), "value")
        self.load_button.on_click(lambda _b: self._spawn(self.load()))
        self.unload_button.on_click(lambda _b: self._spawn(self.unload()))

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def name(self) -> str:
        """The selected model's name ("" when none)."""
        return self.model.value[0] if self.model.value else ""

    async def refresh(self) -> None:
        """List the repository's model versions (``name / version (STATE)``) in the dropdown."""
        index = await self.store.server.repository_index()
        options = [(f"{r['name']} / {r['version']} ({r['state']})" if "version" in r
                    else f"{r['name']} ({r.get('state', 'not loaded')})",
                    (r["name"], r.get("version", ""))) for r in index]
        current = self.model.value
        self.model.options = options
        values = [value for _, value in options]
        if current in values:
            self.model.value = current
        elif values:
            self.model.value = values[0]

    async def show_config(self) -> None:
        """Move the sliders to the selected model's current settings (without applying)."""
        if not self.name:
            return
        try:
            config = await current_config(self.store.server, self.name)
        except Exception as exc:  # noqa: BLE001 - shown in the status line
            self._show(exc)
            return
        knobs, reasons = read_knobs(config), knob_reasons(config)
        self._syncing = True
        try:
            self.preferred_batch_size.max = max(knobs.max_batch_size, 1)
            self.max_queue_delay.value = knobs.max_queue_delay_us
            self.preferred_batch_size.value = (knobs.preferred_batch_sizes or (0,))[0]
        finally:
            self._syncing = False
        sliders = {"max_queue_delay_us": self.max_queue_delay, "preferred_batch_sizes": self.preferred_batch_size}
        for knob, slider in sliders.items():
            slider.disabled, slider.tooltip = knob in reasons, reasons.get(knob)
        shown = sorted({reasons[knob] for knob in sliders if knob in reasons})
        self.status.value = escape(f"not for {self.name}: {'; '.join(shown)}") if shown else ""

    async def apply(self, **knob_values: Unpack[KnobValues]) -> dict | None:
        """Reload the selected model with knobs changed (``max_queue_delay_us=100``,
        ``preferred_batch_sizes=(8,)``, any :class:`~workbench.config_edits.knobs.ConfigKnobs`
        field). Returns the config JSON loaded, or None after showing the error."""
        try:
            loaded = await load_with(self.store.server, self.name, **knob_values)
        except Exception as exc:  # noqa: BLE001 - shown in the status line
            self._show(exc)
            return None
        self._show(f"'{self.name}' reloaded with {knob_values}")
        return loaded

    async def load(self) -> None:
        """Load the selected model from its config file."""
        await self._call("loaded", self.store.server.load_model)

    async def unload(self) -> None:
        """Unload the selected model."""
        await self._call("unloaded", self.store.server.unload_model)

    async def settle(self) -> None:
        """Wait for what the widgets started (see ``EngineStore.settle``)."""
        await self.store.settle()

    def _on_knob(self, _change: dict) -> None:
        if self._syncing or not self.name:
            return
        preferred = self.preferred_batch_size.value
        self._spawn(self.apply(max_queue_delay_us=self.max_queue_delay.value,
                               preferred_batch_sizes=(preferred,) if preferred else ()))

    async def _call(self, done: str, method) -> None:
        name = self.name
        try:
            await method(name)
        except Exception as exc:  # noqa: BLE001 - shown in the status line
            self._show(exc)
        else:
            self._show(f"'{name}' {done}")
        await self.refresh()

    def _show(self, what: object) -> None:
        text = user_text(what) if isinstance(what, BaseException) else str(what)
        color = "#b00020" if isinstance(what, BaseException) else "inherit"
        self.status.value = f'<span style="color:{color}">{escape(text)}</span>'

    def _spawn(self, coroutine) -> None:
        self.store.spawn(coroutine)


__all__ = ["MAX_QUEUE_DELAY_RANGE_US", "ModelControls"]
