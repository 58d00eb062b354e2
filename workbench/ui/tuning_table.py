"""The Tuning tab's table of measured steps, as a person reads it at a glance.

Its rows are :func:`workbench.perf.json_records` (perf_analyzer's CSV columns, latencies in
whole **µs**, throughput in infer/s) after the setting each step measured. perf_analyzer's
report has some twenty columns, more than fit beside each other in a browser window: the
table shows the ones a tuning decision reads (:data:`SHOWN`: the setting, the load, the
throughput, the latency percentiles and average, the server's queue and compute time,
errors, stability) under short headers (perf_analyzer's name and the unit in each header's
tooltip; the units said once above the table), in columns that share the table's width, so
that every header and value is shown whole inside the table at a 1400 px wide window, in the
Jupyter-hosted dashboard and in a notebook's narrower output alike. The "all perf_analyzer
columns" checkbox shows the rest too (columns then sized to their data, the table scrolling
sideways, the setting column frozen at its left). The data behind the table always holds
every column.
"""

from __future__ import annotations

import re

import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import BooleanFormatter, NumberFormatter

#: perf_analyzer's column -> the header shown (short, with its unit); shown by default, in
#: this order (the table's columns follow it; the others come after, hidden)
SHOWN = {
    "Setting": "setting", "Concurrency": "in flight", "Request Rate": "rate /s",
    "Inferences/Second": "infer/s", "p50 latency": "p50", "p99 latency": "p99",
    "Avg latency": "avg", "Server Queue": "queue", "Server Compute Infer": "compute",
    "Errors": "errors", "Stable": "stable",
}
#: the setting column's width, pixels (a longer setting wraps)
SETTING_WIDTH = 240
#: what the short headers leave out, said once above the table
UNITS = ("Latencies (p50, p99, avg, queue, compute) in **µs**, throughput in inferences/s; "
         "hover a header for perf_analyzer's column.")

#: a latency percentile's column (``p90 latency``): its header
PERCENTILE = re.compile(r"^p(\d+) latency$")
#: the checkbox's label
ALL_COLUMNS = "all perf_analyzer columns"


def shown(column: str) -> bool:
    """Whether ``column`` (perf_analyzer's name) is shown without "all columns"."""
    return column in SHOWN


def ordered(columns: list[str]) -> list[str]:
    """``columns`` with the shown ones first, in :data:`SHOWN`'s order."""
    first = [c for c in SHOWN if c in columns]
    return first + [c for c in columns if c not in SHOWN]


def title(column: str) -> str:
    """The header of ``column``: :data:`SHOWN`'s, ``pN`` for another percentile,
    else perf_analyzer's name."""
    match = PERCENTILE.match(column)
    return SHOWN.get(column) or (f"p{match.group(1)}" if match else column)


class StepTable:
    """The table widget and its "all columns" checkbox.

    Attributes:
        widget: the Tabulator (its ``value`` holds every column of :attr:`rows`).
        all_columns: the checkbox that shows the columns left out by default.
        rows: one dict per measured step, in the order measured.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.widget = pn.widgets.Tabulator(
            pd.DataFrame(), disabled=True, show_index=False, sizing_mode="stretch_width",
            height=260, layout="fit_columns", frozen_columns=["Setting"], sortable=False,
            widths={"Setting": SETTING_WIDTH})
        self.all_columns = pn.widgets.Checkbox(label=ALL_COLUMNS, value=False)
        self.all_columns.param.watch(lambda _e: self._columns(), "value")

    def layout(self) -> pn.viewable.Viewable:
        return pn.Column(pn.Row(self.all_columns, pn.pane.Markdown(UNITS, margin=(0, 10))), self.widget,
                         sizing_mode="stretch_width")

    def clear(self) -> None:
        """No rows (a new run)."""
        self.rows = []
        self.widget.value = pd.DataFrame()

    def add(self, setting: str, record: dict) -> None:
        """Add one step: ``record`` is its :func:`~workbench.perf.json_records` row."""
        self.rows.append({"Setting": setting, **record})
        frame = pd.DataFrame(self.rows)
        columns = ordered(list(frame.columns))
        frame = frame[columns]
        if columns != list(self.widget.value.columns):  # the column set changed (a first row)
            self.widget.titles = {c: title(c) for c in columns}
            self.widget.header_tooltips = {c: f"{c} (perf_analyzer's column){_unit(c)}" for c in columns}
            self.widget.formatters = _formatters(columns)
            self._columns(columns)
        self.widget.value = frame

    def _columns(self, columns: list[str] | None = None) -> None:
        columns = list(self.widget.value.columns) if columns is None else columns
        every = self.all_columns.value
        # all columns do not fit beside each other: sized to their data, scrolling sideways
        self.widget.layout = "fit_data_table" if every else "fit_columns"
        self.widget.hidden_columns = [] if every else [c for c in columns if not shown(c)]


def _unit(column: str) -> str:
    if column in ("Inferences/Second", "Send Rate", "Request Rate"):
        return ", per second"
    if column in ("Setting", "Concurrency", "Errors", "Stable", "Batch Size", "Request Count",
                  "Delayed Requests"):
        return ""
    return ", µs"


def _formatters(columns: list[str]) -> dict:
    """Whole µs with thousands separators, rates with one decimal, yes/no as ticks."""
    formatters: dict = {"Setting": {"type": "textarea"}}  # a long setting wraps
    for column in columns:
        if column in ("Inferences/Second", "Send Rate", "Request Rate"):
            formatters[column] = NumberFormatter(format="0,0.0", text_align="right")
        elif column == "Stable":
            formatters[column] = BooleanFormatter()
        elif column not in ("Setting", "Concurrency"):
            formatters[column] = NumberFormatter(format="0,0", text_align="right")
    return formatters


__all__ = ["ALL_COLUMNS", "SETTING_WIDTH", "SHOWN", "UNITS", "StepTable", "ordered", "shown", "title"]
