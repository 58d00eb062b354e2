"""The Live tab: one periodic callback streams LiveStatistics into bounded Bokeh sources."""

from __future__ import annotations

import asyncio
import math
import sys

import pytest

from tests.ui.ui_helpers import add_sub_request
from workbench import Server
from workbench.testing.fake_nvml import fake_nvml
from workbench.ui.gpu import GpuSample, gpu_sampler
from workbench.ui.live_plots import PAD_S, sweep_window
from workbench.ui.live_view import SERIES, LiveView
from workbench.ui.store import EngineStore


async def test_a_tick_streams_one_row_of_what_the_engine_did(server: Server, store: EngineStore) -> None:
    view = LiveView(store, history=50)
    view.tick()  # first interval: nothing happened
    assert view.model.options == ["add_sub/1", "digits_mlp/1", "digits_mlp/2"]
    assert view.model.value == "add_sub/1"
    await asyncio.gather(*(server.infer(add_sub_request(batch=2)) for _ in range(30)))
    assert view.tick() == 1
    data = view.series.data
    assert set(data) == set(SERIES) and len(data["time"]) == 2
    assert data["inferences_per_s"][0] == 0 and math.isnan(data["p99_ms"][0])
    assert data["inferences_per_s"][1] > 0
    assert 0 < data["p50_ms"][1] <= data["p95_ms"][1] <= data["p99_ms"][1]
    assert data["compute_ms"][1] > 0 and data["pending"][1] == 0
    executed = dict(zip(view.batches.data["batch_size"], view.batches.data["executions"], strict=True))
    assert sum(size * count for size, count in executed.items()) == 60
    view.close()


async def test_history_is_bounded_and_switching_model_replays_it(server: Server, store: EngineStore) -> None:
    view = LiveView(store, history=3)
    for _ in range(5):
        await server.infer(add_sub_request())
        view.tick()
    assert len(view.series.data["time"]) == 3  # rollover
    view.model.value = "digits_mlp/2"
    assert len(view.series.data["time"]) == 3
    assert all(rate == 0 for rate in view.series.data["inferences_per_s"])
    assert view.batches.data["batch_size"] == []
    view.model.value = "add_sub/1"
    assert view.batches.data == {"batch_size": [1], "executions": [3]}  # kept history: 3 ticks
    view.close()


async def test_closing_detaches_from_the_engine(server: Server, store: EngineStore) -> None:
    view = LiveView(store)
    view.close()
    await server.infer(add_sub_request())
    assert view.live._latencies == {}


async def test_no_gpu_no_gpu_plot(store: EngineStore) -> None:
    assert gpu_sampler() is None  # no GPU here: nothing is made up
    view = LiveView(store)
    assert "gpu" not in view.figures
    view.close()


async def test_a_gpu_source_gets_its_own_streamed_plot(store: EngineStore) -> None:
    readings = [[GpuSample(0, 40.0, 2_000_000_000, 8_000_000_000),
                 GpuSample(1, 60.0, 1_000_000_000, 8_000_000_000)]]
    view = LiveView(store, gpu=lambda: readings[0])
    view.tick()
    assert "gpu" in view.figures
    assert view.gpu_series.data["utilization_pct"] == [50.0]
    assert view.gpu_series.data["memory_used_gb"] == [3.0]
    view.close()


def test_gpu_source_reads_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """With NVML answering (a stand-in pynvml: the hardware boundary), the Live tab's source
    turns its readings into percent and bytes."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    source = gpu_sampler()
    assert source is not None
    assert source() == [GpuSample(0, 37.0, 1 << 30, 8 << 30)]


# ---- idle states, axes, stale values, batch-size marks (issue 16 item 9)

def _time_figures(view: LiveView) -> list:
    """The figures on the network traffic's time axis (not the histogram, not the sweeps)."""
    return [fig for name, fig in view.figures.items() if name not in ("batch_sizes", "sweeps")]


async def test_idle_plots_say_no_traffic_on_non_negative_linked_axes(store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    assert "add_sub/1: no traffic" in view.status.object
    assert all(label.visible for label in view.idle_labels.values())
    assert {id(fig.x_range) for fig in _time_figures(view)} == {id(view.time_range)}
    assert view.figures["sweeps"].x_range is not view.time_range  # in-process sweeps: their own
    for fig in view.figures.values():  # axes drawn (an all-NaN auto range draws none) from 0
        assert (fig.y_range.start, fig.y_range.end) == (0, 1)  # not -1..1 (negative requests)
    view.close()


async def test_traffic_then_idle_drops_the_latency_and_says_since_when(
        server: Server, store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    await asyncio.gather(*(server.infer(add_sub_request()) for _ in range(10)))
    view.tick()
    assert "infer/s" in view.status.object and "no traffic" not in view.status.object
    assert not any(label.visible for key, label in view.idle_labels.items() if key != "sweeps")
    assert view.idle_labels["sweeps"].visible  # network traffic: no in-process sweep
    assert view.figures["latency"].y_range.end >= view.series.data["p99_ms"][-1] > 0
    view.tick()  # an interval without requests
    data = view.series.data
    assert math.isnan(data["p99_ms"][-1]) and math.isnan(data["queue_ms"][-1])  # not the old value
    assert data["inferences_per_s"][-1] == 0
    status = view.status.object
    assert "add_sub/1: no traffic for" in status and "last request" in status
    # the traffic's points are still on the time axis: no "no traffic" beside them (it was
    # shown there, reading as a caption of the points)
    assert not any(label.visible for key, label in view.idle_labels.items() if key != "sweeps")
    view.close()


async def test_the_histogram_marks_max_batch_size_and_preferred_sizes_and_follows_edits(
        server: Server, store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    await store.settle()  # the served config is read off the tick
    view.tick()
    assert view.batch_limits.data["batch_size"] == [8]
    assert view.batch_limits.data["kind"] == ["max_batch_size"]
    assert view.batch_preferred.data["batch_size"] == [8]  # Triton's default: [max_batch_size]
    assert view.figures["batch_sizes"].x_range.end >= 8.5
    assert view.idle_labels["batch_sizes"].visible  # no executions yet
    text = (await server.config_files.model_config_file("add_sub"))["text"]
    edited = text.replace("max_batch_size: 8", "max_batch_size: 4").replace(
        "dynamic_batching { }", "dynamic_batching { preferred_batch_size: [2, 4] }")
    assert (await server.config_files.write_model_config("add_sub", edited))["reloaded"]
    for _ in range(view.config_every):  # re-read every few ticks
        view.tick()
    await store.settle()
    view.tick()
    assert view.batch_limits.data["batch_size"] == [4]
    assert view.batch_preferred.data["batch_size"] == [2, 4]
    await server.infer(add_sub_request(batch=2))
    view.tick()
    assert not view.idle_labels["batch_sizes"].visible
    view.close()


async def test_every_time_series_marks_each_interval_so_a_lone_one_shows(store: EngineStore) -> None:
    """One interval with traffic between idle ones (their latency dropped: NaN) has no neighbour
    for a line: each series also draws a dot per interval (a new user saw blank latency and
    queue/compute plots under the README example's short bursts)."""
    from bokeh.models import Line, Scatter
    from bokeh.models.renderers import GlyphRenderer  # not in the __all__ mypy reads of bokeh.models

    view = LiveView(store)
    for key in ("throughput", "latency", "queue_compute"):
        renderers = [r for r in view.figures[key].renderers if isinstance(r, GlyphRenderer)]
        lines = {r.glyph.y for r in renderers if isinstance(r.glyph, Line)}
        dots = {r.glyph.y for r in renderers if isinstance(r.glyph, Scatter)}
        assert lines and dots == lines, key
    view.close()


def _samples(busy: range, length: int) -> list:
    """``length`` one-second samples of add_sub/1, with traffic in the seconds of ``busy``."""
    from workbench.live_stats import LiveSample

    return [LiveSample(time=1_000.0 + i, interval_s=1.0, model="add_sub", version="1",
                       requests_per_s=50.0 if i in busy else 0.0,
                       inferences_per_s=50.0 if i in busy else 0.0, failures=0,
                       p50_us=900.0 if i in busy else None, p95_us=None,
                       p99_us=1_000.0 if i in busy else None, queue_us=None, compute_us=None)
            for i in range(length)]


async def test_the_time_axis_follows_a_burst_not_the_whole_history(store: EngineStore) -> None:
    """A 25 s burst at the end of five minutes of kept history filled 8 % of the axis (Bokeh's
    automatic range spans every kept row): the axis now spans the last minute with traffic."""
    view = LiveView(store, history=300)
    view.tick()
    view.live.history[("add_sub", "1")].extend(_samples(range(250, 275), 300))
    view.model.value = "digits_mlp/1"
    view.model.value = "add_sub/1"  # replayed from the kept history
    start, end = view.time_range.start, view.time_range.end
    assert len(view.series.data["time"]) == 300
    burst = 25_000 / (float(end) - float(start))  # type: ignore[arg-type]
    assert burst > 0.4, (start, end)
    assert start == (1_000 + 250 - 2) * 1000  # the burst's first second, less 2 s
    view.close()


def test_the_idle_labels_show_once_no_traffic_is_on_the_time_axis() -> None:
    from workbench.ui.live_view import _traffic_on_axis

    times = [float(t * 1000) for t in range(300)]
    recent = [5.0 if 250 <= t < 275 else 0.0 for t in range(300)]  # 24 s idle: still plotted
    old = [5.0 if 100 <= t < 125 else 0.0 for t in range(300)]  # 175 s idle: off the axis
    assert _traffic_on_axis({"time": times, "requests_per_s": recent})
    assert not _traffic_on_axis({"time": times, "requests_per_s": old})
    assert not _traffic_on_axis({"time": [], "requests_per_s": []})


def test_follow_window_shows_the_idle_minute_once_traffic_is_old() -> None:
    from workbench.ui.live_plots import follow_window

    times = [float(t * 1000) for t in range(300)]
    assert follow_window(times, [200 <= t < 225 for t in range(300)]) == (237_000.0, 299_500.0)
    assert follow_window(times, [False] * 300) == (237_000.0, 299_500.0)
    assert follow_window([], []) is None
    assert follow_window(times[:10], [True] * 10) == (-2_000.0, 9_500.0)


async def test_in_process_sweeps_are_plotted_apart_from_network_traffic(
        server: Server, store: EngineStore) -> None:
    from workbench.perf import InProcessClient

    view = LiveView(store)
    view.tick()
    client = InProcessClient(server)
    request = client.prepare("add_sub", "", add_sub_request().inputs)
    for _ in range(5):
        await client.infer(request)
    view.tick()
    data = view.series.data
    assert data["inferences_per_s"][-1] == 0 and math.isnan(data["p99_ms"][-1])
    assert view.sweep_series.data["inferences_per_s"][-1] > 0
    assert not view.idle_labels["sweeps"].visible
    assert "(in-process sweep)" in view.diagnosis.object
    await server.infer(add_sub_request())  # as the frontends call it
    view.tick()
    assert view.series.data["inferences_per_s"][-1] > 0
    assert len(view.sweep_series.data["time"]) == 1
    view.close()


async def test_the_versions_of_the_model_are_overlaid_with_a_legend(store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    view.model.value = "digits_mlp/2"
    view.tick()
    assert view.versions["versions_throughput"]["label"] == ["v1", "v2"]
    assert view.versions["versions_latency"]["label"] == ["v1 p50", "v1 p99", "v2 p50", "v2 p99"]
    assert view.versions["versions_queue_compute"]["label"] == [
        "v1 queue", "v1 compute", "v2 queue", "v2 compute"]
    assert all(len(xs) == 2 for xs in view.versions["versions_throughput"]["xs"])
    assert view.figures["versions_latency"].x_range is view.time_range
    view.close()


async def test_the_diagnosis_line_and_the_histogram_s_fill(server: Server, store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    assert "No traffic in the last 30 s" in view.diagnosis.object
    await store.settle()  # the served config (max_batch_size 8, preferred [8])
    await asyncio.gather(*(server.infer(add_sub_request()) for _ in range(20)))
    view.tick()
    assert view.diagnosis.object.startswith("**Why p99:** ")
    assert "No traffic" not in view.diagnosis.object
    title = view.figures["batch_sizes"].title.text
    assert "mean " in title and " of 8" in title and "% at a preferred size" in title
    view.close()


async def test_a_model_without_a_batcher_shows_batching_off_and_no_fill(tmp_path) -> None:
    """A python add_sub with max_batch_size 8 and no dynamic batcher (each request executes
    alone, like the sample python and ensemble models of max_batch_size 64): the histogram
    says "batching off", with no fill ratio ("of 8") and no max_batch_size or preferred marks.
    New-user trial finding (c); this failed before."""
    import numpy as np

    from workbench import InferenceRequest, ServerOptions, Tensor
    from workbench.testing.attach import write_python_add_sub

    repo = write_python_add_sub(tmp_path / "models")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("dynamic_batching { max_queue_delay_microseconds: 100 }", ""))
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit", load_model=["add_sub"])
    ones = np.ones((1, 4), np.float32)
    async with Server(options) as engine:
        store = EngineStore(engine)
        view = LiveView(store, gpu=None)
        view.tick()
        await store.settle()  # the served config is read off the tick
        for _ in range(3):
            await engine.infer(InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones),
                                                            Tensor("INPUT1", "FP32", ones)]))
        view.tick()
        title = view.figures["batch_sizes"].title.text
        assert "batching off" in title and " of 8" not in title and "%" not in title, title
        assert view.batch_limits.data["batch_size"] == [] and view.batch_preferred.data["batch_size"] == []
        assert view.figures["batch_sizes"].x_range.end < 8
        view.close()


async def test_the_batch_axis_spans_the_sizes_formed_not_a_far_max_batch_size(
        server: Server, store: EngineStore) -> None:
    """digits_mlp (max_batch_size 64, the preferred size 64 by default) at batch 1: the axis
    ends near the bars (it spanned 1..64, the bars a sliver at the left) and the title says
    where max_batch_size is. New-user trial finding (c); this failed before."""
    import numpy as np

    from workbench import InferenceRequest, Tensor

    view = LiveView(store, gpu=None)
    view.tick()
    view.model.value = "digits_mlp/2"
    await store.settle()
    await server.infer(InferenceRequest("digits_mlp", [Tensor("pixels", "FP32", np.ones((1, 64), np.float32))]))
    view.tick()
    assert view.figures["batch_sizes"].x_range.end < 20
    assert "max_batch_size 64 off the axis" in view.figures["batch_sizes"].title.text
    view.close()


async def test_legends_sit_right_of_the_plots_and_a_click_hides_one_line(store: EngineStore) -> None:
    """Every Live legend is right of its plot area (they sat over the lines' start, top left)
    and hides a line on a click; the overlay draws one renderer per line, so its legend hides
    that version alone (a multi_line's legend hid every line: bokeh#6780). New-user trial
    finding (d); this failed before."""
    from bokeh.models.annotations import Legend

    view = LiveView(store)
    view.tick()
    view.model.value = "digits_mlp/2"
    view.tick()
    for key, fig in view.figures.items():
        legends = list(fig.select(type=Legend))
        assert all(legend in fig.right and legend not in fig.center for legend in legends), key
        assert all(legend.click_policy == "hide" for legend in legends), key
    legend = next(iter(view.figures["versions_latency"].select(type=Legend)))
    shown = [item for item in legend.items if item.visible]
    assert [item.label.value for item in shown] == ["v1 p50", "v1 p99", "v2 p50", "v2 p99"]
    assert all(len(item.renderers) == 1 for item in shown)
    assert len({item.renderers[0] for item in shown}) == 4
    view.close()


def test_the_sweeps_time_axis_has_bounds_before_and_after_a_sweep() -> None:
    """Before a first sweep the sweeps plot shows the live window (Bokeh's automatic range had
    no bounds and warned in the browser's console); after, every sweep with PAD_S either side."""
    assert sweep_window([], (1000.0, 2000.0)) == (1000.0, 2000.0)
    assert sweep_window([10_000.0, 40_000.0], (0.0, 1.0)) == (10_000.0 - PAD_S * 1000, 40_000.0 + PAD_S * 1000)
