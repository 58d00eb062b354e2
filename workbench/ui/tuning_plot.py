"""The Tuning tab's plot: throughput (x, inferences per second) against p99 latency (y,
**milliseconds**), one line per setting tried, streamed a point per measured step, with the
knee of each setting, the best step under the p99 target and the target itself marked.

A :class:`TuningPlot` is built per run (a new figure, so the legend holds that run's
settings only). Its changes may come from a background task (the run): each goes through
:func:`~workbench.ui.bokeh_doc.change_models`, under the session's document lock in a Bokeh
server session (applied on the session's next tick), at once elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Span
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from workbench.perf import StepResult
from workbench.ui.bokeh_doc import change_models

#: the name of a setting's source in the document: this prefix, then the setting's label
SERIES_NAME = "tuning_series:"
#: the columns of every source (a series, the knees, the best steps)
COLUMNS = ("throughput", "p99_ms", "p50_ms", "level", "setting")


def point(setting: str, result: StepResult) -> dict[str, list]:
    """One step as a row of :data:`COLUMNS` (latencies converted from µs to ms)."""
    return {"throughput": [result.throughput_infer_per_s], "p99_ms": [result.p99_us / 1000],
            "p50_ms": [result.p50_us / 1000], "level": [str(result.level)],
            "setting": [setting]}


def _rows(marks: Mapping[str, StepResult | None]) -> dict[str, list]:
    data: dict[str, list] = {column: [] for column in COLUMNS}
    for setting, result in marks.items():
        if result is not None:
            for column, values in point(setting, result).items():
                data[column] += values
    return data


class TuningPlot:
    """The figure of one run and its sources.

    Args:
        shown_in: the Panel pane that shows :attr:`figure` (to push changes in a notebook).

    Attributes:
        figure: the Bokeh figure.
        sources: setting label -> its steps, in the order measured.
        knees: one row per setting with a knee (:func:`workbench.perf.knee`).
        best: one row per setting with a best step (under the target, if any).
        sla: the p99 target line (hidden without a target).
    """

    def __init__(self, shown_in: pn.viewable.Viewable | None = None) -> None:
        self.shown_in = shown_in
        self.figure = figure(title="Throughput vs p99 latency", height=380,
                             sizing_mode="stretch_width",
                             tools="pan,wheel_zoom,box_zoom,reset,save")
        self.figure.xaxis.axis_label = "throughput (inferences / s)"
        self.figure.yaxis.axis_label = "p99 latency (ms)"
        self.figure.add_tools(HoverTool(tooltips=[
            ("setting", "@setting"), ("load", "@level"), ("infer/s", "@throughput{0.0}"),
            ("p99 ms", "@p99_ms{0.000}"), ("p50 ms", "@p50_ms{0.000}")]))
        self.sources: dict[str, ColumnDataSource] = {}
        self.knees = ColumnDataSource({column: [] for column in COLUMNS})
        self.best = ColumnDataSource({column: [] for column in COLUMNS})
        self.sla = Span(location=0, dimension="width", line_dash="dashed", line_color="gray",
                        visible=False)
        self.figure.add_layout(self.sla)
        self.figure.scatter("throughput", "p99_ms", source=self.knees, marker="triangle",
                            size=16, fill_color=None, line_color="black", line_width=2,
                            legend_label="knee")
        self.figure.scatter("throughput", "p99_ms", source=self.best, marker="star", size=18,
                            fill_color="gold", line_color="black", legend_label="best under target")

    def series(self, setting: str) -> None:
        """Draw ``setting``'s (empty) line and points, unless drawn: its source is in
        :attr:`sources` once the change is applied."""
        self._change(lambda: self._series(setting))

    def add(self, setting: str, result: StepResult) -> None:
        """Stream one measured step into ``setting``'s series (drawn on first use)."""
        self._change(lambda: self._series(setting).stream(point(setting, result)))

    def mark(self, knees: Mapping[str, StepResult | None], best: Mapping[str, StepResult | None],
             sla_p99_ms: float | None) -> None:
        """Replace the knee and best markers, and move (or hide) the target line."""
        knee_rows, best_rows = _rows(knees), _rows(best)

        def marks() -> None:
            self.knees.data = knee_rows
            self.best.data = best_rows
            self.sla.visible = sla_p99_ms is not None
            self.sla.location = sla_p99_ms or 0

        self._change(marks)

    def _change(self, change) -> None:
        change_models(self.figure, change, self.shown_in)

    def _series(self, setting: str) -> ColumnDataSource:
        if setting not in self.sources:
            color = Category10_10[len(self.sources) % len(Category10_10)]
            # named, so a browser finds it (``Bokeh.documents[0].get_model_by_name(...)``)
            source = ColumnDataSource({column: [] for column in COLUMNS},
                                      name=f"{SERIES_NAME}{setting}")
            self.figure.line("throughput", "p99_ms", source=source, color=color,
                             legend_label=setting)
            self.figure.scatter("throughput", "p99_ms", source=source, color=color, size=8,
                                legend_label=setting)
            self.figure.legend.location = "top_left"
            self.figure.legend.click_policy = "hide"
            self.sources[setting] = source
        return self.sources[setting]

__all__ = ["COLUMNS", "SERIES_NAME", "TuningPlot", "point"]
