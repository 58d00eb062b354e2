"""The Live tab's Bokeh figures: time series on one shared time axis that follows the recent
traffic (:func:`follow_window`), y-axes from 0 (fitted to the kept data by :func:`fit_y`), a
"no traffic" label per plot, the batch-size histogram with the served ``max_batch_size`` and
preferred batch sizes marked, the overlay figures (versions or replicas: a fixed set of line
slots, one renderer and legend entry each), and in-process sweeps on a figure and time axis
of their own. Every legend sits right of its plot area and hides a line on a click. The idle
text is a second, grey title line of each figure (shown while no traffic is on the time
axis), so it never covers data or a legend.

Only builds models; :class:`~workbench.ui.live_view.LiveView` fills the sources and toggles
the labels (on the session's document, from the periodic callback). Every model a browser
test reads is named (``Bokeh.documents[i].get_model_by_name(...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, Range1d

# bokeh.models re-exports these through a computed __all__ mypy cannot read: imported from
# their subpackage (the same classes)
from bokeh.models.annotations import Legend, LegendItem, Title
from bokeh.plotting import figure

#: the series columns each figure's y-axis is fitted to (by figure key; see ``fit_y``)
Y_COLUMNS = {
    "throughput": ("inferences_per_s", "requests_per_s"),
    "latency": ("p50_ms", "p95_ms", "p99_ms"),
    "queue_compute": ("queue_ms", "compute_ms"),
    "pending": ("pending",),
    "gpu": ("utilization_pct", "memory_used_gb"),
    "batch_sizes": ("executions",),
    "sweeps": ("inferences_per_s",),
    "versions_throughput": ("ys",),
    "versions_latency": ("ys",),
    "versions_queue_compute": ("ys",),
}
#: the overlay figures of the chosen model's versions: key -> (title, y label)
VERSION_FIGURES = {
    "versions_throughput": ("Versions: throughput", "inferences / s"),
    "versions_latency": ("Versions: p50 / p99 in the server", "ms"),
    "versions_queue_compute": ("Versions: queue vs compute (mean per request)", "ms"),
}
#: lines each overlay figure can show (versions or replicas x parts: p50 / p99, queue / compute)
OVERLAY_SLOTS = 12
#: seconds of recent traffic the time axis spans (:func:`follow_window`)
WINDOW_S = 60.0
#: seconds shown before the first interval with traffic in the window
PAD_S = 2.0

#: the "no traffic" text of each plot while the model version is idle (by figure key)
IDLE_TEXT = {
    "throughput": "no traffic",
    "latency": "no requests: nothing measured",
    "queue_compute": "no requests: nothing measured",
    "pending": "no traffic",
    "batch_sizes": "no executions yet",
    "sweeps": "no in-process sweep (Tuning tab, workbench perf in process)",
}


@dataclass
class LivePlots:
    """The figures (by key: throughput, latency, queue_compute, batch_sizes, pending, sweeps,
    the :data:`VERSION_FIGURES` and, with a GPU source, gpu), the time range the network
    plots share and the idle labels (by figure key)."""

    figures: dict = field(default_factory=dict)
    time_range: Range1d = field(default_factory=Range1d)
    idle_labels: dict[str, Title] = field(default_factory=dict)
    #: per overlay figure key, its :data:`OVERLAY_SLOTS` lines (one source, renderer and
    #: legend entry each; an unused one is empty, its entry hidden)
    overlay_slots: dict[str, list[OverlaySlot]] = field(default_factory=dict)


@dataclass
class OverlaySlot:
    """One line of an overlay figure: its source (``x``: ms since the epoch, ``y``), its
    renderer (colour set per line) and its legend entry (click it to hide the line)."""

    source: ColumnDataSource
    renderer: object
    item: LegendItem


def live_plots(series: ColumnDataSource, batches: ColumnDataSource, limits: ColumnDataSource,
               preferred: ColumnDataSource, gpu: ColumnDataSource | None,
               sweeps: ColumnDataSource | None = None, overlay: bool = False) -> LivePlots:
    """Build the Live tab's figures on these sources.

    Args:
        series: the time series (``workbench.ui.live_view.SERIES`` columns; time in ms since
            the epoch, latencies in ms).
        batches: ``batch_size`` / ``executions`` of the kept history.
        limits: ``batch_size`` / ``kind`` / ``label``: the served max_batch_size (one row, or
            none when the model does not batch).
        preferred: ``batch_size``: the served preferred batch sizes.
        gpu: the GPU series (``workbench.ui.live_view.GPU_SERIES``), or None for no GPU plot.
        sweeps: the in-process sweeps' series (``time``, ``inferences_per_s``, ``p99_ms``),
            plotted on a time axis of their own; None: no sweep figure.
        overlay: draw the :data:`VERSION_FIGURES` (:attr:`LivePlots.overlay_slots`: one
            renderer per line, so a legend click hides that line alone; a ``multi_line``'s
            legend hides all its lines at once, bokeh#6780).

    Every legend sits right of its plot area (never over a line) and hides a line on a click.
    """
    # set by the view (follow_window); Range1d: Bokeh's automatic range spans all kept data
    time_range = Range1d(start=0, end=1, name="live_time_range")
    plots = LivePlots(time_range=time_range)

    def time_figure(key: str, title: str, y_label: str):
        fig = figure(title=title, height=240, x_axis_type="datetime", x_range=time_range,
                     y_range=Range1d(start=0, end=1, name=f"live_{key}_y"),
                     sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save",
                     name=f"live_{key}")
        fig.yaxis.axis_label = y_label
        plots.figures[key] = fig
        return fig

    def draw(fig, column: str, label: str, color: str = "#1f77b4", **line) -> None:
        """A line and a dot per interval: an interval with traffic between idle ones (whose
        latency is dropped) has no neighbour to draw a line to, and showed nothing."""
        fig.line("time", column, source=series, legend_label=label, color=color, **line)
        fig.scatter("time", column, source=series, legend_label=label, color=color, size=5)

    throughput = time_figure("throughput", "Throughput", "inferences / s")
    draw(throughput, "inferences_per_s", "infer/s")
    draw(throughput, "requests_per_s", "requests/s", color="gray", line_dash="dashed")
    latency = time_figure("latency", "Latency in the server", "ms")
    for column, color in (("p50_ms", "#1f77b4"), ("p95_ms", "#ff7f0e"), ("p99_ms", "#d62728")):
        draw(latency, column, column[:3], color)
    split = time_figure("queue_compute", "Queue vs compute (mean per request)", "ms")
    draw(split, "queue_ms", "queue", "#9467bd")
    draw(split, "compute_ms", "compute", "#2ca02c")

    histogram = figure(title="Executions by batch size", height=240,
                       sizing_mode="stretch_width", tools="save", name="live_batch_sizes",
                       x_range=Range1d(start=0, end=2, name="live_batch_range"),
                       y_range=Range1d(start=0, end=1, name="live_batch_sizes_y"))
    histogram.vbar(x="batch_size", top="executions", width=0.8, source=batches)
    histogram.vspan(x="batch_size", source=limits, line_color="#d62728", line_dash="dashed",
                    line_width=2, legend_label="max_batch_size")
    histogram.vspan(x="batch_size", source=preferred, line_color="#2ca02c", line_dash="dotted",
                    line_width=2, legend_label="preferred")
    histogram.xaxis.axis_label, histogram.yaxis.axis_label = "batch size", "executions"
    plots.figures["batch_sizes"] = histogram

    pending = time_figure("pending", "Pending requests (queued)", "requests")
    pending.step("time", "pending", source=series, mode="after")

    if sweeps is not None:
        fig = figure(title="In-process sweeps (Tuning tab, workbench perf in process)", height=240,
                     # set by the view (sweep_window): Bokeh's automatic range has no bounds
                     # before the first sweep and warned "could not set initial ranges" in the
                     # browser's console on every render of the idle plot
                     x_axis_type="datetime", x_range=Range1d(start=0, end=1, name="live_sweeps_time_range"),
                     y_range=Range1d(start=0, end=1, name="live_sweeps_y"),
                     sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save",
                     name="live_sweeps")
        fig.yaxis.axis_label = "inferences / s"
        fig.scatter("time", "inferences_per_s", source=sweeps, legend_label="infer/s", size=5)
        fig.line("time", "inferences_per_s", source=sweeps, legend_label="infer/s")
        plots.figures["sweeps"] = fig

    for key in VERSION_FIGURES if overlay else ():
        fig = time_figure(key, *VERSION_FIGURES[key])
        slots = []
        for index in range(OVERLAY_SLOTS):
            source = ColumnDataSource({"x": [], "y": []}, name=f"live_{key}_line_{index}")
            line = fig.line("x", "y", source=source, line_width=2)
            slots.append(OverlaySlot(source, line, LegendItem(label=value(""), renderers=[line], visible=False)))
        fig.add_layout(Legend(items=[slot.item for slot in slots], name=f"live_{key}_legend"), "right")
        plots.overlay_slots[key] = slots

    if gpu is not None:
        fig = time_figure("gpu", "GPU (mean over devices)", "% / GB")
        fig.line("time", "utilization_pct", source=gpu, legend_label="utilisation %")
        fig.line("time", "memory_used_gb", source=gpu, legend_label="memory GB", color="#8c564b")

    for fig in plots.figures.values():  # right of the plot area, a click hides the line
        for legend in list(fig.center):
            if isinstance(legend, Legend):
                fig.center.remove(legend)
                fig.add_layout(legend, "right")
        for legend in fig.select(type=Legend):
            legend.click_policy = "hide"
            legend.location = "top_left"

    for key, text in IDLE_TEXT.items():  # a second title line: never over the data or legend
        if key not in plots.figures:
            continue
        label = Title(text=text, text_color="#888888", text_font_style="italic",
                      text_font_size="13px", visible=True, name=f"live_idle_{key}")
        plots.figures[key].add_layout(label, "above")
        plots.idle_labels[key] = label
    return plots


def fit_y(fig, data: dict, columns: tuple[str, ...]) -> None:
    """Set ``fig``'s y-range to 0 .. 110 % of the largest finite value of ``columns`` in
    ``data`` (0 .. 1 when there is none: an idle plot keeps its axes; Bokeh's automatic range
    gives -1 .. 1 for no data and draws no axes for an all-NaN column). Changed only when
    the end moves by more than 1 %."""
    values = [v for c in columns for v in data.get(c, ()) if v is not None and math.isfinite(v)]
    end = max(values, default=0) * 1.1 or 1.0
    if fig.y_range.start != 0 or abs(fig.y_range.end - end) > 0.01 * end:
        fig.y_range.start, fig.y_range.end = 0, end


def sweep_window(times_ms: list[float], idle: tuple[float, float], pad_s: float = PAD_S) -> tuple[float, float]:
    """The sweeps plot's time axis (ms since the epoch): every sweep's point, ``pad_s`` either
    side (a single point: ``pad_s`` around it); ``idle`` (the live plots' window) before the
    first sweep."""
    if not times_ms:
        return idle
    return min(times_ms) - pad_s * 1000, max(times_ms) + pad_s * 1000


def follow_window(times_ms: list[float], busy: list[bool], window_s: float = WINDOW_S,
                  pad_s: float = PAD_S) -> tuple[float, float] | None:
    """The time axis' range (ms since the epoch) over rows at ``times_ms``, ``busy`` where the
    interval had traffic: from the first busy row within ``window_s`` before the last busy
    one (less ``pad_s``) to the latest row, so a 25 s burst fills most of the axis rather
    than a sliver at the right edge of the kept history; once the last traffic is more than
    ``window_s`` old, the last ``window_s`` of rows (idle). None without rows."""
    if not times_ms:
        return None
    end = times_ms[-1]
    traffic = [t for t, b in zip(times_ms, busy, strict=True) if b]
    if not traffic or traffic[-1] < end - window_s * 1000:
        return max(times_ms[0], end - window_s * 1000) - pad_s * 1000, end + 500
    first = min(t for t in traffic if t >= traffic[-1] - window_s * 1000)
    return first - pad_s * 1000, end + 500


__all__ = ["IDLE_TEXT", "OVERLAY_SLOTS", "PAD_S", "VERSION_FIGURES", "WINDOW_S", "Y_COLUMNS", "LivePlots",
           "OverlaySlot", "fit_y", "follow_window", "live_plots", "sweep_window"]
