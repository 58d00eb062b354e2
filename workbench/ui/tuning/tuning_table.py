"""The Tuning tab's table: one row per point the tuner measured, as a person reads a tuning
decision: the setting and its load, the throughput (inferences/s), the latency at the goals'
percentile (**ms**), whether the windows agreed (stable; "±% of mean": the largest deviation of
the last three windows from their mean, in **%**, the figure the stability rule compares with
the Stability (%) tolerance; and how many windows were measured), failed requests, and why a
point does not meet the goals; after the run, the chosen point is marked ★.

Rows come from :meth:`workbench.tuning.TuneResult.rows` (the same rows as the CSV export;
latencies in **µs** there) or, while a run goes on, from :func:`live_row` (the same fields
for one point, without the Pareto and chosen marks only the finished result knows).
"""

from __future__ import annotations

import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import BooleanFormatter, NumberFormatter

from workbench.tuning import Goals, Point
from workbench.tuning.points import meets

#: a row's field (TuneResult.rows()) -> the header shown; ``latency`` is the goals' percentile
HEADERS = {"setting": "setting", "load": "load", "throughput_infer_per_s": "infer/s", "latency_ms": "p99 ms",
           "stable": "stable", "deviation_pct": "±% of mean", "windows": "windows", "errors": "errors",
           "why_not": "why not", "chosen": "chosen"}
#: the headers' tooltips (where a header alone could be read two ways)
TOOLTIPS = {"deviation_pct": ("the largest deviation of the last three windows from their mean, throughput or "
                              "latency, in %: a point is stable when it is within Stability (%) (docs/tuning.md)"),
            "stable": "the last three windows agreed: each within Stability (%) of their mean"}
#: the setting column's width, pixels (a longer setting wraps)
SETTING_WIDTH = 260


def live_row(point: Point, goals: Goals, memory_mb: float | None) -> dict:
    """The fields of :meth:`~workbench.tuning.TuneResult.rows` a table shows, for one point
    measured during a run (``memory_mb``: its setting's measured memory, **MiB**)."""
    fails = meets(point, goals, memory_mb)
    pct = goals.percentile
    return {"setting": point.setting.label, "mode": point.level.mode, "level": point.level.value,
            "throughput_infer_per_s": round(point.throughput, 2), f"p{pct}_us": round(point.latency_us(pct)),
            "stable": point.stable, "deviation_pct": round(point.deviation_pct(pct), 1),
            "windows": len(point.windows), "errors": point.errors, "why_not": "; ".join(fails), "chosen": False}


def shown_row(row: dict, percentile: int) -> dict:
    """A result row as the table shows it (the load in words, the latency in ms, ★)."""
    mode = "concurrency" if row["mode"] == "concurrency" else "rate"
    return {"setting": row["setting"], "load": f"{mode} {row['level']:g}",
            "throughput_infer_per_s": row["throughput_infer_per_s"],
            "latency_ms": row[f"p{percentile}_us"] / 1000, "stable": row["stable"],
            "deviation_pct": row["deviation_pct"], "windows": row["windows"], "errors": row["errors"],
            "why_not": row["why_not"], "chosen": "★" if row["chosen"] else ""}


class PointTable:
    """The table widget.

    Attributes:
        widget: the Tabulator (its ``value``: one row per point, the columns of
            :data:`HEADERS`).
        rows: the result rows shown, in the order measured.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.percentile = 99
        self.widget = pn.widgets.Tabulator(
            pd.DataFrame(columns=list(HEADERS)), disabled=True, show_index=False, sizing_mode="stretch_width",
            height=260, layout="fit_columns", sortable=False, widths={"setting": SETTING_WIDTH},
            titles=dict(HEADERS), header_tooltips=dict(TOOLTIPS), formatters=_formatters())

    def layout(self) -> pn.viewable.Viewable:
        return self.widget

    def reset(self, percentile: int) -> None:
        """No rows; latency at ``percentile`` (a new run)."""
        self.percentile = percentile
        self.widget.titles = {**HEADERS, "latency_ms": f"p{percentile} ms"}
        self.show([])

    def add(self, row: dict) -> None:
        """Add one row (:func:`live_row`)."""
        self.show([*self.rows, row])

    def show(self, rows: list[dict]) -> None:
        """Show ``rows`` (:meth:`~workbench.tuning.TuneResult.rows`) instead of those shown."""
        self.rows = list(rows)
        frame = pd.DataFrame([shown_row(r, self.percentile) for r in rows], columns=list(HEADERS))
        self.widget.value = frame


def _formatters() -> dict:
    """Rates and ms with decimals, yes/no as ticks, long texts wrapped."""
    return {"setting": {"type": "textarea"}, "why_not": {"type": "textarea"},
            "throughput_infer_per_s": NumberFormatter(format="0,0.0", text_align="right"),
            "latency_ms": NumberFormatter(format="0,0.000", text_align="right"),
            "deviation_pct": NumberFormatter(format="0.0", text_align="right"),
            "stable": BooleanFormatter()}


__all__ = ["HEADERS", "SETTING_WIDTH", "TOOLTIPS", "PointTable", "live_row", "shown_row"]
