"""The Tuning table as a person reads it: the columns a tuning decision reads, under short
headers with their unit (perf_analyzer's name as the tooltip), the rest behind "all
perf_analyzer columns"; the data keeps every column."""

from __future__ import annotations

from tests.ui.test_ui_tuning_plot import step
from workbench.perf import json_records
from workbench.ui.tuning_table import StepTable


def layout(table: StepTable) -> str:
    """The table widget's layout, read afresh (mypy keeps a compared Literal narrowed across the toggle)."""
    return table.widget.layout


def test_the_table_shows_the_columns_read_at_a_glance_and_all_on_request() -> None:
    table = StepTable()
    for level in (1, 2):
        table.add("max_queue_delay_us=100", json_records([step(level, 600.0 * level, 2000)])[0])
    frame = table.widget.value
    assert list(frame["Setting"]) == ["max_queue_delay_us=100"] * 2
    assert list(frame["p99 latency"]) == [2000, 2000]  # perf_analyzer's columns, µs
    visible = [c for c in frame.columns if c not in table.widget.hidden_columns]
    assert visible == ["Setting", "Concurrency", "Inferences/Second", "p50 latency", "p99 latency",
                       "Avg latency", "Errors", "Stable"]
    assert list(frame.columns)[:len(visible)] == visible  # shown first, in this order
    assert {"Client Send", "Client Recv", "Min latency", "Send Rate", "p90 latency"} <= set(
        table.widget.hidden_columns)
    assert [table.widget.titles[c] for c in visible] == [
        "setting", "in flight", "infer/s", "p50", "p99", "avg", "errors", "stable"]
    assert table.widget.titles["p90 latency"] == "p90"
    assert layout(table) == "fit_columns"  # the shown columns share the table's width
    assert table.widget.header_tooltips["Inferences/Second"] == \
        "Inferences/Second (perf_analyzer's column), per second"
    assert table.widget.header_tooltips["p99 latency"] == "p99 latency (perf_analyzer's column), µs"
    table.all_columns.value = True
    assert table.widget.hidden_columns == [] and layout(table) == "fit_data_table"
    table.all_columns.value = False
    assert "Client Send" in table.widget.hidden_columns
    table.clear()
    assert table.rows == [] and table.widget.value.empty
