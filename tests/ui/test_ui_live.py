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
    return [fig for name, fig in view.figures.items() if name != "batch_sizes"]


async def test_idle_plots_say_no_traffic_on_non_negative_linked_axes(store: EngineStore) -> None:
    view = LiveView(store)
    view.tick()
    assert "add_sub/1: no traffic" in view.status.object
    assert all(label.visible for label in view.idle_labels.values())
    assert {id(fig.x_range) for fig in _time_figures(view)} == {id(view.time_range)}
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
    assert not any(label.visible for label in view.idle_labels.values())
    assert view.figures["latency"].y_range.end >= view.series.data["p99_ms"][-1] > 0
    view.tick()  # an interval without requests
    data = view.series.data
    assert math.isnan(data["p99_ms"][-1]) and math.isnan(data["queue_ms"][-1])  # not the old value
    assert data["inferences_per_s"][-1] == 0
    status = view.status.object
    assert "add_sub/1: no traffic for" in status and "last request" in status
    assert view.idle_labels["latency"].visible and view.idle_labels["throughput"].visible
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
