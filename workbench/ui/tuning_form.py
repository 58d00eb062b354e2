"""The Tuning tab's form: the model, the load (concurrency or request rate and its levels),
the input data (random, zeros, or a JSON file in perf_analyzer's ``--input-data`` format,
typed as a path or uploaded), batch size, warm-up and measurement window (**ms**), the
candidate settings to compare, and the p99 target (**ms**); :meth:`TuningForm.plan` reads
it into a :class:`SweepPlan`.

An uploaded file is saved in a temporary folder owned by the form (removed when the form is
garbage collected) and its path put in the path field.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass

import panel as pn

from workbench.perf import LoadLevel, PerfOptions
from workbench.ui.tuning_settings import Candidate, parse_candidates, parse_levels

#: level lists offered when the mode changes (doubling steps: the knee rule compares neighbours)
DEFAULT_LEVELS = {"concurrency": "1, 2, 4, 8, 16", "request_rate": "100, 200, 400, 800, 1600"}
#: input data choices -> PerfOptions.input_data ("file": the path field)
INPUTS = {"random": "random", "zeros": "zero", "JSON file": "file"}
MODES = {"concurrency": "concurrency", "request rate": "request_rate"}
#: how a candidate is written, for the placeholder (an example, said to be one: no candidate
#: is swept until one is typed)
CANDIDATE_HINT = ("for example (none is swept until typed):\nmax_queue_delay_us=200\n"
                  "max_queue_delay_us=1000 preferred_batch_sizes=4,8\ninstance_count=2")


@dataclass(frozen=True)
class SweepPlan:
    """One run of the tab.

    Attributes:
        options: the measurement options (model, batch size, input data, window, warm-up).
        levels: the load levels, in order.
        candidates: settings to try after (or without) the served config.
        include_served: sweep the config as served now first.
        sla_p99_us: the p99 target, **µs** (None: no target).
    """

    options: PerfOptions
    levels: tuple[LoadLevel, ...]
    candidates: tuple[Candidate, ...]
    include_served: bool
    sla_p99_us: float | None


class TuningForm:
    """The form's widgets."""

    def __init__(self) -> None:
        self.model = pn.widgets.Select(label="Model", options=[], width=200)
        self.mode = pn.widgets.RadioButtonGroup(options=list(MODES), value="concurrency")
        self.levels = pn.widgets.TextInput(label="Levels (start:end:step or a list)",
                                           value=DEFAULT_LEVELS["concurrency"], width=220)
        self.input = pn.widgets.Select(label="Input data", options=list(INPUTS), value="random",
                                       width=120)
        self.path = pn.widgets.TextInput(label="JSON file (--input-data format)",
                                         placeholder="/path/to/data.json", width=260)
        self.upload = pn.widgets.FileInput(accept=".json", multiple=False)
        self.batch_size = pn.widgets.IntInput(label="Batch size", value=1, start=1, width=100)
        self.interval_ms = pn.widgets.IntInput(label="Window (ms)", value=2000, start=50,
                                               step=250, width=110)
        self.warmup_ms = pn.widgets.IntInput(label="Warm-up (ms)", value=500, start=0, step=250,
                                             width=110)
        self.sla_ms = pn.widgets.FloatInput(label="p99 target (ms, 0 = none)", value=0.0,
                                            start=0.0, step=1.0, width=170)
        self.include_served = pn.widgets.Checkbox(label="sweep the served config", value=True)
        self.candidates = pn.widgets.TextAreaInput(
            label="Candidate settings to compare (one per line; knobs of the Config tab)",
            placeholder=CANDIDATE_HINT, height=90, sizing_mode="stretch_width")
        self._folder = tempfile.mkdtemp(prefix="workbench-tuning-")
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        self.mode.param.watch(self._on_mode, "value")
        self.upload.param.watch(self._on_upload, "value")

    def layout(self) -> pn.viewable.Viewable:
        # rows that wrap: a narrow output (a notebook cell) moves the last fields to the next
        # line instead of cutting them off at its right edge
        def row(*widgets: pn.viewable.Viewable) -> pn.FlexBox:
            return pn.FlexBox(*widgets, flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")

        return pn.Column(
            row(self.model, self.mode, self.levels, self.batch_size, self.interval_ms,
                self.warmup_ms),
            row(self.input, self.path, self.upload),
            row(self.include_served, self.sla_ms),
            self.candidates, sizing_mode="stretch_width")

    def sla_p99_us(self) -> float | None:
        """The p99 target in **µs** (None when 0 or empty)."""
        return self.sla_ms.value * 1000 if self.sla_ms.value else None

    def plan(self) -> SweepPlan:
        """The run the form describes.

        Raises:
            PerfError: no model, bad levels, a batch size / window / warm-up out of range, or
                an input data path that is not a file.
            ValueError: a malformed candidate line (:func:`parse_candidates`), or neither
                the served config nor a candidate to sweep.
        """
        mode = MODES[self.mode.value]
        levels = parse_levels(mode, self.levels.value or "")
        chosen = INPUTS[self.input.value]
        input_data = (self.path.value or "").strip() if chosen == "file" else chosen
        if chosen == "file" and not input_data:
            raise ValueError("choose a JSON file (a path on the server, or upload one)")
        options = PerfOptions(self.model.value or "", batch_size=self.batch_size.value or 0,
                              input_data=input_data,
                              measurement_interval_ms=self.interval_ms.value or 0,
                              warmup_ms=self.warmup_ms.value or 0)
        candidates = parse_candidates(self.candidates.value or "")
        if not candidates and not self.include_served.value:
            raise ValueError("nothing to sweep: tick 'sweep the served config' or add a candidate")
        return SweepPlan(options, tuple(levels), tuple(candidates), self.include_served.value,
                         self.sla_p99_us())

    def _on_mode(self, event) -> None:
        if self.levels.value in DEFAULT_LEVELS.values():
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


__all__ = ["DEFAULT_LEVELS", "INPUTS", "MODES", "SweepPlan", "TuningForm"]
