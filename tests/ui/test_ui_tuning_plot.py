"""The Tuning plot as a person reads it: both axes start at 0 and end above the largest
value plotted (the SLA line included), refitted as points stream in; an unstable point is
hollow, the chosen one starred; the latency is at the run's percentile; the legend lies
outside the plot area (right of it), holding every setting; Reset returns to the fit."""

from __future__ import annotations

import pytest
from bokeh.core.property.vectorization import Value
from bokeh.models import Range1d
from bokeh.models.annotations import Legend, LegendItem  # not in the __all__ mypy reads of bokeh.models

from tests.tuning.tuning_points import point, setting
from workbench.perf import LoadLevel, StepResult
from workbench.tuning import Goals, Point, Setting
from workbench.ui.tuning.tuning_plot import (
    CHOSEN,
    KEPT,
    KEPT_UNSTABLE,
    LEGEND_NAME,
    PAD,
    SERVED,
    UNSTABLE,
    UNSTABLE_SERVED,
    TuningPlot,
)
from workbench.ui.tuning.tuning_table import HEADERS, PointTable, live_row


def step(level: int, throughput: float, p99_us: int) -> StepResult:
    """A measured step: ``throughput`` infer/s with ``p99_us`` µs p99 (what the plot reads)."""
    latencies = {50: p99_us // 2, 90: p99_us, 95: p99_us, 99: p99_us}
    return StepResult(level=LoadLevel("concurrency", level), batch_size=1, window_s=1.0,
                      request_count=int(throughput), error_count=0, delayed_count=0,
                      sent_count=int(throughput), throughput_infer_per_s=throughput,
                      send_rate_per_s=throughput, latency_avg_us=p99_us // 2, latency_std_us=0,
                      latency_min_us=1, latency_max_us=p99_us, percentiles_us=latencies,
                      stabilizing_latency_us=p99_us // 2, percentile=None, client_send_us=0,
                      client_recv_us=0, response_wait_us=p99_us // 2)


def measured(setting: str, level: int, throughput: float, p99_us: int, stable: bool = True) -> Point:
    """A point of ``setting`` (``knob=value``) at concurrency ``level``: three equal windows."""
    knob, _, value = setting.partition("=")
    return Point(Setting(((knob, int(value)),)), LoadLevel("concurrency", level),
                 (step(level, throughput, p99_us),) * 3, stable, 0.0, 0.0)


def fitted(axis: object) -> Range1d:
    """A figure's axis range as the plot sets it (a Range1d; bokeh types a figure's with any Range)."""
    assert isinstance(axis, Range1d), axis
    return axis


def ends(axis: object) -> tuple[float, float]:
    """(start, end) of a figure's axis: numbers here (bokeh types them number, datetime or timedelta)."""
    start, end = fitted(axis).start, fitted(axis).end
    assert isinstance(start, (int, float)) and isinstance(end, (int, float)), (start, end)
    return start, end


def legend_labels(legend: Legend) -> list[object]:
    """The legend's item labels in order (each item a LegendItem labelled ``value(text)``)."""
    labels: list[object] = []
    for item in legend.items:
        assert isinstance(item, LegendItem), item
        label = item.label
        assert isinstance(label, Value), label  # value(text), as the plot sets it
        labels.append(label.value)
    return labels


def test_the_axes_start_at_zero_and_fit_every_point_as_they_stream_in() -> None:
    plot = TuningPlot()
    assert (ends(plot.figure.y_range)[0], ends(plot.figure.x_range)[0]) == (0, 0)
    plot.add(measured("max_queue_delay_us=1", 1, 600.0, 7200))
    plot.add(measured("max_queue_delay_us=1", 2, 1300.0, 4100))
    plot.add(measured("max_queue_delay_us=2", 1, 3100.0, 2100))
    (y_start, y_end), (x_start, x_end) = ends(plot.figure.y_range), ends(plot.figure.x_range)
    assert y_start == 0 and y_end >= 7.2 * (1 + PAD) - 1e-9  # the highest p99, padded
    assert y_end <= 7.2 * 1.5  # fitted, not squashed
    assert x_start == 0 and x_end >= 3100 * (1 + PAD) - 1e-9
    y = fitted(plot.figure.y_range)
    assert (y.reset_start, y.reset_end) == (0, y.end)  # Reset comes back to the fit
    plot.add(measured("max_queue_delay_us=2", 2, 3500.0, 9000))  # a higher point: the axis follows
    assert ends(plot.figure.y_range)[1] >= 9.0 * (1 + PAD) - 1e-9


def test_unstable_points_are_hollow_the_chosen_one_starred_and_the_sla_inside_the_range() -> None:
    plot = TuningPlot()
    plot.reset(95, 15.0)
    stable, unstable = measured("instance_count=1", 1, 600.0, 2000), measured("instance_count=1", 2, 900.0, 3000, False)
    plot.add(stable)
    plot.add(unstable)
    assert list(plot.sources["instance_count=1"].data["fill_alpha"]) == [1.0, 0.0]
    assert list(plot.sources["instance_count=1"].data["state"]) == ["stable", "unstable"]
    plot.mark(stable)
    assert list(plot.chosen.data["level"]) == ["Concurrency: 1"]
    assert plot.sla.visible and plot.sla.location == 15.0 and ends(plot.figure.y_range)[1] >= 15.0
    assert plot.figure.yaxis[0].axis_label == "p95 latency (ms)"  # the run's percentile
    plot.mark(None)
    assert list(plot.chosen.data["level"]) == []


def test_the_star_of_a_run_that_kept_the_served_config_is_not_called_chosen() -> None:
    """New-user trial: a star labelled "chosen" beside "the gain is not proven, keeping the
    served config" (and a disabled Apply) read as a contradiction."""
    plot = TuningPlot()
    point = measured("max_queue_delay_us=500", 1, 600.0, 2000)
    plot.add(point)
    plot.mark(point, kept=True)
    assert legend_labels(plot.legend)[0] == KEPT
    plot.reset()
    assert legend_labels(plot.legend)[0] == CHOSEN  # the next run starts plain


def test_the_legend_lies_outside_the_plot_area_and_lists_each_setting() -> None:
    plot = TuningPlot()
    plot.add(measured("max_queue_delay_us=100", 1, 600.0, 2000))
    plot.add(measured("max_queue_delay_us=700", 1, 700.0, 2500))
    legends = [m for m in plot.figure.select(type=Legend) if isinstance(m, Legend)]  # typed as any Model
    assert len(legends) == 1 and legends[0].name == LEGEND_NAME
    assert legends[0] in plot.figure.right and legends[0] not in plot.figure.center
    assert legends[0].click_policy == "hide"
    labels = legend_labels(legends[0])
    assert labels == [CHOSEN, UNSTABLE, "max_queue_delay_us=100", "max_queue_delay_us=700"]


def test_reset_empties_the_one_figure_for_the_next_run() -> None:
    plot = TuningPlot()
    figure = plot.figure
    first = measured("max_queue_delay_us=100", 1, 600.0, 9000)
    plot.add(first)
    plot.mark(first)
    plot.reset(99, None)
    plot.add(measured("max_queue_delay_us=100", 1, 300.0, 2000))
    assert plot.figure is figure and list(plot.sources) == ["max_queue_delay_us=100"]
    named = [m for m in figure.select({"name": "tuning_series:max_queue_delay_us=100"})]
    assert named == [plot.sources["max_queue_delay_us=100"]]  # the last run's only
    labels = legend_labels(plot.legend)
    assert labels == [CHOSEN, UNSTABLE, "max_queue_delay_us=100"]
    assert list(plot.chosen.data["level"]) == [] and not plot.sla.visible
    assert ends(plot.figure.y_range)[1] < 9.0  # fitted to this run's points only


def test_the_table_shows_the_deviation_the_stability_rule_tests() -> None:
    """New-user trial: "spread %" 16.3 on a point marked stable beside "Stability (%) 10": the
    rule is each window within 10 % of the mean, and max - min can reach twice that. The table
    shows the figure the rule compares with the tolerance, and its header says so."""
    stable = point(setting(instance_count=1), [900.0, 1000.0, 1100.0], 2.0)  # ±10 %, max - min 20 %
    unstable = point(setting(instance_count=1), [800.0, 1000.0, 1200.0], 2.0, level=2)
    assert stable.stable and not unstable.stable
    assert max(stable.throughput_spread_pct, stable.latency_spread_pct) == pytest.approx(20.0)
    goals = Goals()
    rows = [live_row(p, goals, None) for p in (stable, unstable)]
    assert [r["deviation_pct"] for r in rows] == [10.0, 20.0]
    table = PointTable()
    table.reset(99)
    table.show(rows)
    column = [c for c, h in HEADERS.items() if h == "±% of mean"]
    assert column == ["deviation_pct"] and "spread_pct" not in table.widget.value.columns
    assert list(table.widget.value["deviation_pct"]) == [10.0, 20.0]
    assert "within Stability (%)" in table.widget.header_tooltips["deviation_pct"]


def test_a_kept_star_beside_an_unstable_served_config_says_why_in_the_legend_and_hover() -> None:
    """New-user trial: the star "best stable point (not applied: served config kept)" sat at 790
    infer/s while the served config measured 16,550 infer/s in unstable windows; the plot did not
    say that the served config was the hollow line, nor why it was kept."""
    plot = TuningPlot()
    served = measured("max_queue_delay_us=0", 4, 16_550.0, 900, stable=False)
    best = measured("max_queue_delay_us=100", 1, 790.0, 1300)
    plot.add(served)
    plot.add(best)
    assert UNSTABLE in legend_labels(plot.legend)  # the hollow marks are named in the legend
    plot.mark(best, kept=True, served="max_queue_delay_us=0")
    labels = legend_labels(plot.legend)
    assert labels[0] == KEPT_UNSTABLE and "unstable" in KEPT_UNSTABLE
    assert "max_queue_delay_us=0" + UNSTABLE_SERVED in labels
    assert list(plot.sources["max_queue_delay_us=0"].data["state"]) == ["unstable, served config"]
    tooltips = plot.hover.tooltips
    assert isinstance(tooltips, list) and ("windows", "@state") in tooltips
    # a served config with a stable point: named as served, the plain "kept" star
    plot.reset()
    plot.add(measured("max_queue_delay_us=0", 1, 700.0, 900))
    plot.add(best)
    plot.mark(best, kept=True, served="max_queue_delay_us=0")
    labels = legend_labels(plot.legend)
    assert labels[0] == KEPT and "max_queue_delay_us=0" + SERVED in labels
