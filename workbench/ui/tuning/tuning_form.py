"""The Tuning tab's form: what a run of the tuner (:class:`workbench.tuning.Tuner`) searches and
how it measures, read into a :class:`~workbench.tuning.TuneSpec` by :meth:`TuningForm.spec`.

* the model, the strategy (``quick`` / ``brute``) and the search space, shown *before* the
  run as editable text (``knob=v1,v2 ...``, :func:`workbench.tuning.parse_space`), filled from
  the served config and this machine (:func:`workbench.tuning.default_space`) when a model
  is chosen (a later fill for the same model keeps what a person typed), with the search's
  size (settings × load levels) said under it as the server holds the text now;
* the load: concurrency or request rate and its levels (``1, 2, 4``, ``1:16`` doubling,
  ``1:16:4``);
* the goals: an SLA at p99 or p95 (**ms**), the objective, a minimum throughput
  (inferences/s) and a host memory budget (**MiB**), each optional (0: none);
* the measurement: window and warm-up (**ms**), the stability tolerance (**%**, windows
  agree when within it of their mean) and the most windows a point may take; batch size and
  input data (random, zeros, or a JSON file in perf_analyzer's ``--input-data`` format,
  typed as a path or uploaded into a temporary folder owned by the form).

Nothing here touches the engine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import panel as pn
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.perf import PerfError, PerfOptions
from workbench.tuning import (
    OBJECTIVES,
    STRATEGIES,
    Goals,
    Machine,
    MeasureOptions,
    TuneSpec,
    default_space,
    parse_space,
)
from workbench.tuning.space import levels_from_text

#: level lists offered when the mode changes (a request-rate axis has no default of its own)
DEFAULT_LEVELS = {"concurrency": "1, 2, 4, 8, 16", "request_rate": "100, 200, 400, 800, 1600"}
#: input data choices -> PerfOptions.input_data ("file": the path field)
INPUTS = {"random": "random", "zeros": "zero", "JSON file": "file"}
MODES = {"concurrency": "concurrency", "request rate": "request_rate"}
#: the percentiles the SLA may be on
PERCENTILES = {"p99": 99, "p95": 95}
#: the space field's label (a person finds the field by it)
SPACE_LABEL = "Search space (knob=v1,v2 ..., filled from the model and this machine)"


class TuningForm:
    """The form's widgets (see the module docstring)."""

    def __init__(self) -> None:
        self.model = pn.widgets.Select(label="Model", options=[], width=200)
        self.strategy = pn.widgets.RadioButtonGroup(options=list(STRATEGIES), value="quick")
        self.space = pn.widgets.TextAreaInput(label=SPACE_LABEL, height=70, sizing_mode="stretch_width")
        self.mode = pn.widgets.RadioButtonGroup(options=list(MODES), value="concurrency")
        self.levels = pn.widgets.TextInput(label="Load levels (1, 2, 4 or start:end or start:end:step)",
                                           value=DEFAULT_LEVELS["concurrency"], width=260)
        self.sla_ms = pn.widgets.FloatInput(label="SLA (ms, 0 = none)", value=0.0, start=0.0, width=130)
        self.percentile = pn.widgets.Select(label="at", options=list(PERCENTILES), value="p99", width=70)
        self.objective = pn.widgets.Select(label="Objective", options=list(OBJECTIVES), value="throughput",
                                           width=190)
        self.min_throughput = pn.widgets.FloatInput(label="Min throughput (infer/s, 0 = none)", value=0.0,
                                                    start=0.0, width=220)
        self.host_memory_mb = pn.widgets.FloatInput(label="Host memory budget (MiB, 0 = none)", value=0.0,
                                                    start=0.0, width=220)
        self.interval_ms = pn.widgets.IntInput(label="Window (ms)", value=2000, start=50, step=250, width=110)
        self.warmup_ms = pn.widgets.IntInput(label="Warm-up (ms)", value=500, start=0, step=250, width=110)
        self.stability = pn.widgets.FloatInput(label="Stability (%)", value=10.0, start=0.0, width=110)
        self.max_windows = pn.widgets.IntInput(label="Max windows", value=6, start=3, width=110)
        self.batch_size = pn.widgets.IntInput(label="Batch size", value=1, start=1, width=100)
        self.input = pn.widgets.Select(label="Input data", options=list(INPUTS), value="random", width=120)
        self.path = pn.widgets.TextInput(label="JSON file (--input-data format)",
                                         placeholder="/path/to/data.json", width=260)
        self.upload = pn.widgets.FileInput(accept=".json", multiple=False)
        #: the search's size from the space and levels as the server holds them now (what
        #: Run measures), said under the space and kept up to date as a person types
        self.size = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["workbench-tuning-size"])
        #: (model, space, levels) the last fill put in the form
        self._filled: tuple[str, str, str] | None = None
        self._folder = tempfile.mkdtemp(prefix="workbench-tuning-")
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        self.mode.param.watch(self._on_mode, "value")
        for widget in (self.space, self.levels, self.mode):
            widget.param.watch(lambda _e: self._show_size(), "value")
        self.upload.param.watch(self._on_upload, "value")

    def layout(self) -> pn.viewable.Viewable:
        # rows that wrap: a narrow output (a notebook cell) moves the last fields to the next
        # line instead of cutting them off at its right edge
        def row(*widgets: pn.viewable.Viewable) -> pn.FlexBox:
            return pn.FlexBox(*widgets, flex_wrap="wrap", align_items="flex-end", sizing_mode="stretch_width")

        return pn.Column(
            row(self.model, self.strategy), self.space, self.size,
            row(self.mode, self.levels, self.sla_ms, self.percentile, self.objective),
            row(self.min_throughput, self.host_memory_mb),
            row(self.interval_ms, self.warmup_ms, self.stability, self.max_windows, self.batch_size),
            row(self.input, self.path, self.upload), sizing_mode="stretch_width")

    def typed(self) -> tuple[str, str]:
        """The space's and the levels' text now: what :meth:`prefill` compares with, to keep
        what a person typed after a model was picked."""
        return self.space.value or "", self.levels.value or ""

    def prefill(self, config: ModelConfig, machine: Machine, since: tuple[str, str] | None = None) -> None:
        """The space (and, in concurrency mode, the levels) :func:`default_space` derives from
        the served ``config`` and ``machine``. ``since``: :meth:`typed` when the model was
        picked; a field whose text changed since (a person typed, or an earlier fill landed)
        keeps it: a fill that arrives late never overwrites typing."""
        space = default_space(config, machine)
        space_then, levels_then = since if since is not None else self.typed()
        model = config.name
        # a fill for the model the form was last filled for keeps what differs from that fill
        # (a person's typing): only a pick of another model replaces typed text
        last = self._filled if self._filled is not None and self._filled[0] == model else None
        space_now, levels_now = self.typed()
        if space_now == space_then and (last is None or space_now in ("", last[1])):
            self.space.value = space.text()
        if (MODES[self.mode.value] == "concurrency" and levels_now == levels_then
                and (last is None or levels_now in ("", last[2]))):
            self.levels.value = ", ".join(f"{level.value:g}" for level in space.levels)
        self._filled = (model, self.space.value or "", self.levels.value or "")

    def goals(self) -> Goals:
        """The goals of the form.

        Raises:
            ValueError: a bound < 0 (0 is none).
        """
        for widget in (self.sla_ms, self.min_throughput, self.host_memory_mb):
            if (widget.value or 0) < 0:
                raise ValueError(f"{widget.name.split(' (')[0]} must be >= 0 (0 = none)")
        return Goals(sla_ms=self.sla_ms.value or None, percentile=PERCENTILES[self.percentile.value],
                     min_throughput=self.min_throughput.value or None,
                     host_memory_mb=self.host_memory_mb.value or None, objective=self.objective.value)

    def spec(self, resume: str | None = None) -> TuneSpec:
        """The run the form describes (``resume``: the resume file it reads and keeps).

        Raises:
            PerfError: a level, batch size, window or warm-up out of range, an input data path
                that is not a file.
            ValueError: no model, no level, a malformed space (:func:`parse_space`), a bad
                goal, a stability <= 0 or fewer than 3 windows.
        """
        if not self.model.value:
            raise ValueError("choose a model")
        mode, text = MODES[self.mode.value], (self.levels.value or "").strip()
        if not text:
            raise ValueError("name at least one load level")
        levels = levels_from_text(mode, text)
        space = (self.space.value or "").strip()
        if not space:
            raise ValueError("the search space is empty: name at least one knob=v1,v2")
        parse_space(space, levels)  # its errors now, before anything runs
        measure = MeasureOptions(self.perf_options(), self.stability.value or 0, self.max_windows.value or 0)
        return TuneSpec(self.model.value, self.goals(), space, text, mode, self.strategy.value,
                        measure, resume)

    def perf_options(self) -> PerfOptions:
        chosen = INPUTS[self.input.value]
        input_data = (self.path.value or "").strip() if chosen == "file" else chosen
        if chosen == "file" and not input_data:
            raise ValueError("choose a JSON file (a path on the server, or upload one)")
        return PerfOptions(self.model.value or "", batch_size=self.batch_size.value or 0, input_data=input_data,
                           measurement_interval_ms=self.interval_ms.value or 0, warmup_ms=self.warmup_ms.value or 0)

    def _show_size(self) -> None:
        """Say how many settings and load levels the space and levels name now, or what is
        wrong with them (the error Run would give)."""
        text = (self.space.value or "").strip()
        if not text:
            self.size.object = ""
            return
        try:
            levels = levels_from_text(MODES[self.mode.value], (self.levels.value or "").strip())
            count = parse_space(text, levels).size()
        except (PerfError, ValueError) as exc:
            self.size.object = f"*Not a search space yet: {exc}*"
            return
        self.size.object = (f"The search: {count} setting{'s' * (count != 1)} × {len(levels)} load "
                            f"level{'s' * (len(levels) != 1)} (brute measures every pair; quick fewer)")

    def _on_mode(self, event) -> None:
        if self.levels.value in DEFAULT_LEVELS.values() or MODES[event.new] == "request_rate":
            self.levels.value = DEFAULT_LEVELS[MODES[event.new]]

    def _on_upload(self, event) -> None:
        if not event.new:
            return
        name = os.path.basename(self.upload.filename or "input_data.json") or "input_data.json"
        path = os.path.join(self._folder, name)
        with open(path, "wb") as file:
            file.write(event.new)
        self.path.value = path
        self.input.value = "JSON file"


__all__ = ["DEFAULT_LEVELS", "INPUTS", "MODES", "PERCENTILES", "SPACE_LABEL", "TuningForm"]
