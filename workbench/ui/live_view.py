"""The Live tab: throughput, latency p50/p95/p99, queue vs compute time, batch sizes and
pending requests of one model version, streamed into Bokeh ``ColumnDataSource``s.

One :class:`~workbench.ui.live_stats.LiveStatistics` per view feeds every plot: the
dashboard's single periodic callback calls :meth:`LiveView.tick` (about once a second), which
closes one statistics interval and streams one row into the time-series source
(``stream(..., rollover=history)``: bounded) and replaces the batch-size histogram. Nothing is
polled per plot. GPU utilisation and memory are plotted only where
:func:`workbench.ui.gpu.gpu_sampler` finds a GPU source.

Units: throughput in inferences per second (batch-weighted, Triton's ``inference_count``),
latencies and queue / compute times in **milliseconds** on the plots (the samples carry µs).
"""

from __future__ import annotations

import math
import time

import panel as pn
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

from workbench.ui.gpu import GpuSample, GpuSampler, gpu_sampler
from workbench.ui.live_stats import LiveSample, LiveStatistics
from workbench.ui.selection import model_of_version_key, version_of_version_key
from workbench.ui.store import EngineStore

#: time-series columns streamed per tick
SERIES = ("time", "inferences_per_s", "requests_per_s", "p50_ms", "p95_ms", "p99_ms",
          "queue_ms", "compute_ms", "pending")
GPU_SERIES = ("time", "utilization_pct", "memory_used_gb")


class LiveView(pn.viewable.Viewer):
    """Live plots of one dashboard session.

    Args:
        store: the engine.
        history: rows kept per plot (ticks; at 1 Hz, 300 = five minutes).
        gpu: the GPU source (default :func:`gpu_sampler`); None: no GPU plot.
    """

    def __init__(self, store: EngineStore, history: int = 300, gpu: GpuSampler | None = None,
                 **params) -> None:
        super().__init__(**params)
        self.store = store
        self.history = history
        self.live = LiveStatistics(store.server, history=history)
        self.gpu = gpu if gpu is not None else gpu_sampler()
        self.model = pn.widgets.Select(label="Model version", options=[])
        # named, so a browser finds them (``Bokeh.documents[0].get_model_by_name(...)``)
        self.series = ColumnDataSource({column: [] for column in SERIES}, name="live_series")
        self.batches = ColumnDataSource({"batch_size": [], "executions": []}, name="live_batches")
        self.gpu_series = ColumnDataSource({column: [] for column in GPU_SERIES}, name="live_gpu")
        self.figures = _figures(self.series, self.batches)
        if self.gpu is not None:
            self.figures["gpu"] = _gpu_figure(self.gpu_series)
        self.model.param.watch(lambda _e: self._replay(), "value")
        # shows the session's selected model (its latest version unless one was chosen)
        store.selection.bind(self.model, name_of=model_of_version_key,
                             version_of=version_of_version_key)

    def __panel__(self) -> pn.viewable.Viewable:
        panes = [pn.pane.Bokeh(f, sizing_mode="stretch_width") for f in self.figures.values()]
        note = [] if self.gpu is not None else [pn.pane.Markdown("*No GPU: no GPU plot.*")]
        return pn.Column(self.model, pn.GridBox(*panes, ncols=2, sizing_mode="stretch_width"),
                         *note, sizing_mode="stretch_width")

    def tick(self) -> int:
        """Close one statistics interval and stream it: returns the rows added to the
        time series (0 or 1). Runs on the engine's loop (the statistics are recorded there)."""
        samples = self.live.sample()
        keys = [f"{s.model}/{s.version}" for s in samples]
        previous = self.model.value
        if keys != list(self.model.options):
            self.model.options = keys
            if self.model.value not in keys:
                self.model.value = keys[0] if keys else None
        if self.gpu is not None:
            self._stream_gpu(self.gpu())
        chosen = next((s for s in samples if f"{s.model}/{s.version}" == self.model.value), None)
        if chosen is None:
            return 0
        if self.model.value != previous:
            return 1  # a new choice was replayed from the history, this sample included
        self.series.stream(_row(chosen), rollover=self.history)
        self._update_histogram()
        return 1

    def close(self) -> None:
        """Detach from the engine's statistics (idempotent)."""
        self.live.close()

    def _selected(self) -> tuple[str, str] | None:
        if not self.model.value:
            return None
        name, _, version = self.model.value.rpartition("/")
        return name, version

    def _replay(self) -> None:
        """Refill the plots from the kept history of the newly chosen model version."""
        key = self._selected()
        kept = list(self.live.history.get(key, ())) if key else []
        rows = [_row(sample) for sample in kept][-self.history:]
        self.series.data = {c: [v for row in rows for v in row[c]] for c in SERIES}
        self._update_histogram()

    def _update_histogram(self) -> None:
        key = self._selected()
        totals: dict[int, int] = {}
        for sample in self.live.history.get(key, ()) if key else ():
            for size, count in sample.batch_sizes.items():
                totals[size] = totals.get(size, 0) + count
        sizes = sorted(totals)
        self.batches.data = {"batch_size": sizes, "executions": [totals[s] for s in sizes]}

    def _stream_gpu(self, samples: list[GpuSample]) -> None:
        if not samples:
            return
        self.gpu_series.stream({
            "time": [time.time() * 1000],
            "utilization_pct": [sum(s.utilization_pct for s in samples) / len(samples)],
            "memory_used_gb": [sum(s.memory_used_bytes for s in samples) / 1e9],
        }, rollover=self.history)


def _ms(value_us: float | None) -> float:
    return math.nan if value_us is None else value_us / 1000


def _row(sample: LiveSample) -> dict[str, list]:
    """One time-series row (Bokeh datetime axes take ms since the epoch; NaN breaks a line
    where an interval had no requests)."""
    return {
        "time": [sample.time * 1000],
        "inferences_per_s": [sample.inferences_per_s],
        "requests_per_s": [sample.requests_per_s],
        "p50_ms": [_ms(sample.p50_us)],
        "p95_ms": [_ms(sample.p95_us)],
        "p99_ms": [_ms(sample.p99_us)],
        "queue_ms": [_ms(sample.queue_us)],
        "compute_ms": [_ms(sample.compute_us)],
        "pending": [sample.pending],
    }


def _time_figure(title: str, y_label: str):
    fig = figure(title=title, height=240, x_axis_type="datetime", sizing_mode="stretch_width",
                 tools="pan,wheel_zoom,box_zoom,reset,save")
    fig.yaxis.axis_label = y_label
    return fig


def _figures(series: ColumnDataSource, batches: ColumnDataSource) -> dict:
    throughput = _time_figure("Throughput", "inferences / s")
    throughput.line("time", "inferences_per_s", source=series, legend_label="infer/s")
    throughput.line("time", "requests_per_s", source=series, legend_label="requests/s",
                    line_dash="dashed", color="gray")
    latency = _time_figure("Latency in the server", "ms")
    for column, color in (("p50_ms", "#1f77b4"), ("p95_ms", "#ff7f0e"), ("p99_ms", "#d62728")):
        latency.line("time", column, source=series, legend_label=column[:3], color=color)
    split = _time_figure("Queue vs compute (mean per request)", "ms")
    split.line("time", "queue_ms", source=series, legend_label="queue", color="#9467bd")
    split.line("time", "compute_ms", source=series, legend_label="compute", color="#2ca02c")
    pending = _time_figure("Pending requests (queued)", "requests")
    pending.step("time", "pending", source=series, mode="after")
    histogram = figure(title="Executions by batch size (kept history)", height=240,
                       sizing_mode="stretch_width", tools="save")
    histogram.vbar(x="batch_size", top="executions", width=0.8, source=batches)
    histogram.xaxis.axis_label, histogram.yaxis.axis_label = "batch size", "executions"
    for fig in (throughput, latency, split):
        fig.legend.location = "top_left"
    return {"throughput": throughput, "latency": latency, "queue_compute": split,
            "batch_sizes": histogram, "pending": pending}


def _gpu_figure(source: ColumnDataSource):
    fig = _time_figure("GPU (mean over devices)", "% / GB")
    fig.line("time", "utilization_pct", source=source, legend_label="utilisation %")
    fig.line("time", "memory_used_gb", source=source, legend_label="memory GB", color="#8c564b")
    return fig


__all__ = ["GPU_SERIES", "LiveView", "SERIES"]
