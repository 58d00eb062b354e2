"""The Live tab: throughput, latency p50/p95/p99, queue vs compute time, batch sizes and
pending requests of one model version, streamed into Bokeh ``ColumnDataSource``s.

One :class:`~workbench.serving.live_stats.LiveStatistics` per view feeds every plot: the dashboard's
periodic callback calls :meth:`LiveView.tick` (about once a second), which closes one
statistics interval, streams one row into the time series (``rollover=history``: bounded) and
replaces the batch-size histogram; nothing is polled per plot. GPU plots only where
:func:`workbench.ui.live.gpu.gpu_sampler` finds a source. Idle intervals plot NaN latency (the line
stops) and a "no traffic" label; the time plots share one x-range
(:func:`~workbench.ui.live.live_plots.follow_window`) with y from 0; in-process sweep intervals
(``LiveSample.in_process``) go to a figure of their own; versions (or replicas) are overlaid
by :mod:`~workbench.ui.live.live_overlay`; the diagnosis is
:func:`~workbench.ui.live.live_diagnosis.diagnose`. The histogram marks the served
``max_batch_size`` and preferred sizes, read off the tick every :attr:`LiveView.config_every`
ticks and on a new choice.

Threading: Bokeh models change only in :meth:`LiveView.tick` and the Select's callback (Panel
holds the document's lock); the config read is a task on the engine's loop that only stores
what it read, for the next tick. Units: throughput in inferences/s (batch-weighted, Triton's
``inference_count``); latencies and queue / compute in **ms** on the plots (samples carry
µs). What a person sees: docs/live.md, "The Live tab"."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import panel as pn
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource

from workbench import model_config_to_json
from workbench.remote import RemoteLiveStatistics, RemoteServer
from workbench.serving.live_stats import LiveSample
from workbench.ui.live.gpu import GpuSample, GpuSampler, gpu_sampler
from workbench.ui.live.live_diagnosis import WINDOW_S, diagnose
from workbench.ui.live.live_overlay import OVERLAY_TITLES, replica_lines, version_lines
from workbench.ui.live.live_plots import (
    VERSION_FIGURES,
    Y_COLUMNS,
    OverlaySlot,
    fit_y,
    follow_window,
    live_plots,
    sweep_window,
)
from workbench.ui.shared.selection import model_of_version_key, version_of_version_key
from workbench.ui.shared.store import EngineStore

if TYPE_CHECKING:
    from bokeh.models.sources import DataDict

#: time-series columns streamed per tick
SERIES = ("time", "inferences_per_s", "requests_per_s", "p50_ms", "p95_ms", "p99_ms",
          "queue_ms", "compute_ms", "pending")
GPU_SERIES = ("time", "utilization_pct", "memory_used_gb")
#: the in-process sweeps' columns
SWEEP_SERIES = ("time", "inferences_per_s", "p99_ms")
class LiveView(pn.viewable.Viewer):
    """Live plots of one dashboard session.

    Args:
        store: the engine.
        history: rows kept per plot (ticks; at 1 Hz, 300 = five minutes).
        gpu: the GPU source (default :func:`gpu_sampler`); None: no GPU plot.

    Attributes:
        status: the one-line state of the chosen version (traffic, or since when it is idle).
        diagnosis: why p99 is what it is, one sentence over the recent network traffic.
        idle_labels: the "no traffic" label of each plot, by figure key.
        time_range: the x-range every time plot shares.
        batch_limits, batch_preferred: the histogram's marks (``batch_size`` columns).
        config_every: ticks between two reads of the served config.
    """

    config_every = 5

    def __init__(self, store: EngineStore, history: int = 300, gpu: GpuSampler | None = None,
                 **params) -> None:
        super().__init__(**params)
        self.store = store
        self.history = history
        self.live = store.live_statistics(history)  # the engine's, or an attached server's
        self.gpu = gpu if gpu is not None else gpu_sampler()
        self.model = pn.widgets.Select(label="Model version", options=[])
        # attached to several replicas: overlay each replica (the plots above show their sum)
        replicas = isinstance(store.server, RemoteServer) and len(store.server.urls) > 1
        self.overlay = pn.widgets.RadioButtonGroup(
            label="Overlay", options=["versions", "replicas"], value="replicas" if replicas else "versions",
            visible=replicas, css_classes=["workbench-live-overlay"])
        self.status = pn.pane.Markdown("", css_classes=["workbench-live-status"],
                                       sizing_mode="stretch_width")
        self.diagnosis = pn.pane.Markdown("", css_classes=["workbench-live-diagnosis"],
                                          sizing_mode="stretch_width")
        # named, so a browser finds them (``Bokeh.documents[0].get_model_by_name(...)``)
        self.series = ColumnDataSource({column: [] for column in SERIES}, name="live_series")
        self.batches = ColumnDataSource({"batch_size": [], "executions": []}, name="live_batches")
        self.batch_limits = ColumnDataSource({"batch_size": [], "kind": []}, name="live_batch_limits")
        self.batch_preferred = ColumnDataSource({"batch_size": []}, name="live_batch_preferred")
        self.gpu_series = ColumnDataSource({column: [] for column in GPU_SERIES}, name="live_gpu")
        self.sweep_series = ColumnDataSource({column: [] for column in SWEEP_SERIES},
                                             name="live_sweep_series")
        #: the overlay's lines by figure key (``xs``, ``ys``, ``label``, ``color``), as drawn
        self.versions: dict[str, dict[str, list]] = {
            key: {"xs": [], "ys": [], "label": [], "color": []} for key in VERSION_FIGURES}
        plots = live_plots(self.series, self.batches, self.batch_limits, self.batch_preferred,
                           self.gpu_series if self.gpu is not None else None,
                           self.sweep_series, overlay=True)
        self.figures, self.idle_labels, self.time_range = (plots.figures, plots.idle_labels,
                                                           plots.time_range)
        self._slots = plots.overlay_slots
        #: served (max_batch_size, preferred sizes, batching on) by version, written by the
        #: config task
        self._limits: dict[tuple[str, str], tuple[int, list[int], bool]] = {}
        self._ticks = 0
        self.model.param.watch(lambda _e: self._replay(), "value")
        self.overlay.param.watch(lambda _e: self._update_versions(), "value")
        store.selection.on_change(lambda _selection: self._show_status())
        # shows the session's selected model (its latest version unless one was chosen)
        store.selection.bind(self.model, name_of=model_of_version_key,
                             version_of=version_of_version_key)

    def __panel__(self) -> pn.viewable.Viewable:
        panes = [pn.pane.Bokeh(f, sizing_mode="stretch_width") for f in self.figures.values()]
        note = [] if self.gpu is not None else [pn.pane.Markdown("*No GPU: no GPU plot.*")]
        self.overlay_label = pn.pane.Markdown("Overlay below:", visible=self.overlay.visible)
        overlay = pn.Row(self.overlay_label, self.overlay)
        return pn.Column(self.model, self.status, self.diagnosis, overlay,
                         pn.GridBox(*panes, ncols=2, sizing_mode="stretch_width"),
                         *note, sizing_mode="stretch_width")

    def tick(self) -> int:
        """Close one statistics interval and stream it: returns the rows added to the
        time series (0 or 1). Runs on the engine's loop (the statistics are recorded there)."""
        self._ticks += 1
        samples = self.live.sample()
        keys = [f"{s.model}/{s.version}" for s in samples]
        previous = self.model.value
        if keys != list(self.model.options):
            self.model.options = keys
            if self.model.value not in keys:
                self.model.value = keys[0] if keys else None
        if self.gpu is not None:
            self._stream_gpu(self.gpu())
        if self._ticks % self.config_every == 1 or self.config_every == 1:
            self._read_config()
        chosen = next((s for s in samples if f"{s.model}/{s.version}" == self.model.value), None)
        if chosen is None:
            self._show_state()
            return 0
        if self.model.value != previous:
            return 1  # a new choice was replayed from the history, this sample included
        if self.series.data["time"] and self.series.data["time"][-1] == chosen.time * 1000:
            return 0  # an attached server's read is late: that interval is streamed already
        self.series.stream(_row(chosen), rollover=self.history)
        if chosen.in_process:
            self.sweep_series.stream(_sweep_row(chosen), rollover=self.history)
        self._update_histogram()
        self._update_versions()
        self._show_state()
        return 1

    def _fit_axes(self) -> None:
        sources = {"gpu": self.gpu_series.data, "batch_sizes": self.batches.data,
                   "sweeps": self.sweep_series.data}
        for key, lines in self.versions.items():
            sources[key] = {"ys": [v for ys in lines["ys"] for v in ys]}
        for key, fig in self.figures.items():
            fit_y(fig, sources.get(key, self.series.data), Y_COLUMNS[key])
        data = self.series.data
        window = follow_window(list(data["time"]), [rate > 0 for rate in data["requests_per_s"]])
        if window is not None and (self.time_range.start, self.time_range.end) != window:
            self.time_range.start, self.time_range.end = window
        if "sweeps" in self.figures:
            sweeps = self.figures["sweeps"].x_range
            span = sweep_window(list(self.sweep_series.data["time"]), window or (0.0, 1.0))
            if (sweeps.start, sweeps.end) != span:
                sweeps.start, sweeps.end = span

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
        swept = [_sweep_row(sample) for sample in kept if sample.in_process][-self.history:]
        self.sweep_series.data = {c: [v for row in swept for v in row[c]] for c in SWEEP_SERIES}
        self._read_config()
        self._update_histogram()
        self._update_versions()
        self._show_state()

    def _read_config(self) -> None:
        """Read the chosen version's served batching limits off the tick (a task on the
        engine's loop; it only stores them: the next tick draws them)."""
        key = self._selected()
        if key is not None:
            self.store.spawn(self._fetch_limits(key))

    async def _fetch_limits(self, key: tuple[str, str]) -> None:
        try:
            config = model_config_to_json(await self.store.server.model_config(*key))
        except Exception:  # noqa: BLE001 - unloaded meanwhile: no marks until it serves again
            self._limits.pop(key, None)
            return
        batcher = config.get("dynamic_batching")
        # the scheduler forms batches with a dynamic batcher, or a sequence batcher's oldest
        # strategy; otherwise each request executes alone, at the batch size it was sent with
        batching = batcher is not None or bool((config.get("sequence_batching") or {}).get("oldest"))
        preferred = sorted(int(size) for size in (batcher or {}).get("preferred_batch_size", ()))
        self._limits[key] = (int(config.get("max_batch_size", 0)), preferred, batching)

    def _update_histogram(self) -> None:
        key = self._selected()
        totals: dict[int, int] = {}
        for sample in self.live.history.get(key, ()) if key else ():
            for size, count in sample.batch_sizes.items():
                totals[size] = totals.get(size, 0) + count
        sizes = sorted(totals)
        self.batches.data = {"batch_size": sizes, "executions": [totals[s] for s in sizes]}
        limit, preferred, batching = self._limits.get(key, (0, [], False)) if key else (0, [], False)
        if not batching:  # no batcher: no fill to measure, no mark of a target
            limit, preferred = 0, []
        if self.batch_limits.data["batch_size"] != ([limit] if limit else []):
            self.batch_limits.data = {"batch_size": [limit] if limit else [],
                                      "kind": ["max_batch_size"] if limit else []}
        if self.batch_preferred.data["batch_size"] != preferred:
            self.batch_preferred.data = {"batch_size": preferred}
        axis = self.figures["batch_sizes"].x_range
        end = _histogram_end(sizes, [m for m in (limit, *preferred) if m])
        if (axis.start, axis.end) != (0.5, end):
            axis.start, axis.end = 0.5, end
        self.idle_labels["batch_sizes"].visible = not sizes
        fill = _fill_text(totals, limit, preferred) if batching or key not in self._limits else (
            ": batching off (no dynamic batcher: each request executes at its own batch size)")
        beyond = limit > end and bool(sizes)
        title = (f"Executions by batch size{fill}"  # short: a long title runs past the figure
                 + (f"; max_batch_size {limit} off the axis" if beyond else ""))
        if self.figures["batch_sizes"].title.text != title:
            self.figures["batch_sizes"].title.text = title

    def _update_versions(self) -> None:
        """The overlay: every version of the chosen model (one line per version and figure),
        or, attached to several replicas with "replicas" picked, the chosen version on each
        replica (network traffic only, like the plots above; idle intervals NaN)."""
        key = self._selected()
        if (not self.overlay.visible and isinstance(self.live, RemoteLiveStatistics)
                and len(self.live.remote.replica_names) > 1):
            # a cluster's ingress found to hold several replicas (its first read): overlay them
            self.overlay.value = "replicas"
            self.overlay.visible = self.overlay_label.visible = True
        mode = self.overlay.value if self.overlay.visible else "versions"
        if key is None:
            lines = version_lines({}, "")
        elif mode == "replicas" and isinstance(self.live, RemoteLiveStatistics):
            lines = replica_lines(self.live.replicas, self.live.remote.replica_names, key)
        else:
            lines = version_lines(self.live.history, key[0])
        for figure_key in self.versions:
            self.versions[figure_key] = lines[figure_key]
            _draw_lines(self._slots[figure_key], lines[figure_key])
            title = OVERLAY_TITLES[mode][figure_key]
            if self.figures[figure_key].title.text != title:
                self.figures[figure_key].title.text = title

    def _show_state(self) -> None:
        """The status line and the idle labels, from the chosen version's kept history."""
        key = self._selected()
        kept = list(self.live.history.get(key, ())) if key else []
        plotted = _traffic_on_axis(self.series.data)
        for name, label in self.idle_labels.items():
            if name not in ("batch_sizes", "sweeps"):
                label.visible = not plotted
        self.idle_labels["sweeps"].visible = not self.sweep_series.data["time"]
        self._show_status(kept)
        self.diagnosis.object = _diagnosis(kept) if key else ""
        self._fit_axes()

    def _show_status(self, kept: list[LiveSample] | None = None) -> None:
        """The status line: the chosen version's traffic, or that the model the session chose
        (another tab's pick) is not loaded on the server, which the plots then do not show."""
        if kept is None:
            key = self._selected()
            kept = list(self.live.history.get(key, ())) if key else []
        status = _status(self.model.value, kept)
        chosen = self.store.selection.name
        if chosen and not any(model_of_version_key(o) == chosen for o in self.model.options):
            where = self.store.remote.label if self.store.remote is not None else "this engine"
            shown = f" Below: {self.model.value}." if self.model.value else ""
            status = f"**{chosen}** is not loaded on {where}: nothing of it to plot.{shown}"
        elif self.overlay.visible and isinstance(self.live, RemoteLiveStatistics):
            status += f" (The plots show the sum of {len(self.live.remote.replica_names)} replicas.)"
        if self.status.object != status:
            self.status.object = status

    def _stream_gpu(self, samples: list[GpuSample]) -> None:
        if not samples:
            return
        self.gpu_series.stream({
            "time": [time.time() * 1000],
            "utilization_pct": [sum(s.utilization_pct for s in samples) / len(samples)],
            "memory_used_gb": [sum(s.memory_used_bytes for s in samples) / 1e9],
        }, rollover=self.history)


def _traffic_on_axis(data: dict) -> bool:
    """Whether an interval with traffic (``requests_per_s`` > 0) lies on the time axis that
    :func:`follow_window` gives ``data`` (``time`` in ms, one row per interval): the plots
    then show its points, and their "no traffic" label would sit beside them. The status
    line says since when the version is idle."""
    times, rates = list(data["time"]), list(data["requests_per_s"])
    window = follow_window(times, [rate > 0 for rate in rates])
    return window is not None and any(rate > 0 and at >= window[0]
                                      for at, rate in zip(times, rates, strict=True))


def _draw_lines(slots: list[OverlaySlot], lines: dict[str, list]) -> None:
    """Put ``lines`` (``xs``, ``ys``, ``label``, ``color``) into an overlay figure's slots, in
    order (a line beyond the slots is left out); unused slots are emptied and their legend
    entries hidden. A slot a person hid (its legend entry clicked) stays hidden."""
    count = len(lines["label"])
    for index, slot in enumerate(slots):
        used = index < count
        data = {"x": lines["xs"][index], "y": lines["ys"][index]} if used else {"x": [], "y": []}
        if used or slot.source.data["x"]:
            slot.source.data = data
        label = lines["label"][index] if used else ""
        if slot.item.label != value(label):
            slot.item.label = value(label)
        if slot.item.visible != used:
            slot.item.visible = used
        color = lines["color"][index] if used else None
        glyph = getattr(slot.renderer, "glyph", None)
        if color is not None and glyph is not None and glyph.line_color != color:
            glyph.line_color = color


def _status(key: str | None, kept: list[LiveSample]) -> str:
    """One line: what the version does now, or since when it is idle (never an old value
    shown as current)."""
    if not key:
        return "No model version is ready: nothing to plot."
    if not kept:
        return f"{key}: no traffic yet."
    latest = kept[-1]
    if latest.requests_per_s > 0 or latest.failures > 0:
        # the latest interval's figures: say its length (the "Why p99" line reads a longer window)
        p99 = "" if latest.p99_us is None else f", p99 {latest.p99_us / 1000:.1f} ms"
        failed = f", **{latest.failures} failed**" if latest.failures else ""
        return (f"{key} over the last {_span(latest.interval_s)}: {latest.inferences_per_s:.1f} "
                f"infer/s, {latest.requests_per_s:.1f} requests/s{p99}; {latest.pending} "
                f"pending{failed}.")
    last = next((s for s in reversed(kept) if s.requests_per_s > 0 or s.failures > 0), None)
    if last is None:
        span = latest.time - kept[0].time + kept[0].interval_s
        return f"{key}: no traffic in the last {span:.0f} s (the kept history)."
    since = time.strftime("%H:%M:%S", time.localtime(last.time))
    then = "" if last.p99_us is None else f"; p99 then {last.p99_us / 1000:.1f} ms"
    return (f"{key}: no traffic for {latest.time - last.time:.0f} s (last request at "
            f"{since}{then}). Idle intervals are left empty on the plots.")


def _span(seconds: float) -> str:
    """An interval's length for the status line: ``1 s`` (a tick's jitter not shown), ``0.25 s``."""
    return f"{seconds:.0f} s" if seconds >= 0.95 else f"{seconds:.2g} s"


def _diagnosis(kept: list[LiveSample]) -> str:
    """The diagnosis line over the recent network traffic, else over the in-process sweep. Its
    window (:data:`~workbench.ui.live.live_diagnosis.WINDOW_S`) is longer than the status line's one
    interval, so the line names it: a p99 there is the window's, not the latest interval's."""
    network = [s for s in kept if not s.in_process]
    found = diagnose(network)
    head = f"**Why p99 over the last {WINDOW_S:.0f} s:**"
    if found.rule == "no_traffic" and any(s.in_process and s.busy for s in kept[-30:]):
        return f"{head} (in-process sweep) {diagnose(kept).text}"
    return f"{head} {found.text}"


def _histogram_end(sizes: list[int], marks: list[int]) -> float:
    """The batch-size axis' end: the largest formed size, widened to the marks (max_batch_size,
    preferred sizes) up to twice it or 16, so bars at 1-3 of 64 are not crowded at the left
    edge (all marks while nothing executed yet)."""
    if not sizes:
        return max([*marks, 1]) + 0.5
    largest = max(sizes)
    return max([largest, *(m for m in marks if m <= max(2 * largest, 16))]) + 0.5


def _fill_text(totals: dict[int, int], limit: int, preferred: list[int]) -> str:
    """``": mean 3.0 of 16, 40 % at a preferred size"`` (empty without executions)."""
    executions = sum(totals.values())
    if not executions:
        return ""
    mean = sum(size * count for size, count in totals.items()) / executions
    target = max(preferred, default=limit)
    text = f": mean {mean:.1f}" + (f" of {target}" if target else "")
    if preferred:
        hits = sum(count for size, count in totals.items() if size in preferred)
        text += f", {100 * hits / executions:.0f} % at a preferred size"
    return text


def _ms(value_us: float | None) -> float:
    return math.nan if value_us is None else value_us / 1000


def _row(sample: LiveSample) -> DataDict:
    """One time-series row (Bokeh datetime axes take ms since the epoch; NaN breaks a line
    where an interval had no requests). An in-process sweep's interval is an idle one here
    (its figures go to :func:`_sweep_row`)."""
    if sample.in_process:
        return {"time": [sample.time * 1000], "inferences_per_s": [0.0], "requests_per_s": [0.0],
                **{column: [math.nan] for column in SERIES[3:-1]}, "pending": [sample.pending]}
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


def _sweep_row(sample: LiveSample) -> DataDict:
    """One row of the in-process sweeps' series."""
    return {"time": [sample.time * 1000], "inferences_per_s": [sample.inferences_per_s],
            "p99_ms": [_ms(sample.p99_us)]}


__all__ = ["GPU_SERIES", "SERIES", "SWEEP_SERIES", "LiveView"]
