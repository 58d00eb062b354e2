"""The Tuning tab's plot: throughput (x, inferences per second) against latency at the goals'
percentile (y, **milliseconds**), one line per setting the tuner measured, streamed a point
per measured point; an unstable point (its windows never agreed) is drawn hollow (a legend
entry says so), the chosen point is starred, the SLA is a dashed line. After a run the served
config's line is named so in the legend ("(served config, unstable)" when none of its points was
stable) and in the hover, and a star the run did not apply says why.

As a person reads it: both axes start at 0 and end :data:`PAD` above the largest value
plotted (the SLA line included), refitted with every change, so no point is cut off and the
curves fill the plot; the legend sits right of the plot area, never over a curve (click an
entry to hide that setting).

One :class:`TuningPlot` (one figure) serves every run of a tab: :meth:`TuningPlot.reset`
empties it for the next run (its series, legend entries and marks go), so the document never
holds two figures or two series of the same name. The lines of the first ten settings (one
per colour of the palette) are drawn, empty and unnamed, when the figure is built: a
setting takes the next free one (named, given its legend entry), so a run creates no
Bokeh model after the figure is shown. (In a notebook, models created after rendering and
pushed over the comm reached the browser as references it did not know, now and then: a
setting's line and legend entry never appeared.) Its changes may come from a background task
(the run): each goes through
:func:`~workbench.ui.shared.bokeh_doc.change_models`, under the session's document lock in a Bokeh
server session (applied on the session's next tick), at once elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import panel as pn
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, HoverTool, Range1d

# bokeh.models re-exports these through a computed __all__ mypy cannot read: imported from
# their subpackages (the same classes)
from bokeh.models.annotations import Legend, LegendItem, Span, Title
from bokeh.models.renderers import GlyphRenderer
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from workbench.tuning import Point
from workbench.ui.shared.bokeh_doc import change_models

if TYPE_CHECKING:
    from bokeh.models.sources import DataDict

#: the name of a setting's source in the document: this prefix, then the setting's label
SERIES_NAME = "tuning_series:"
#: the columns of every source (a series, the chosen point): ``latency_ms`` is at the goals'
#: percentile, ``fill_alpha`` 1 for a stable point and 0 (hollow) for an unstable one
COLUMNS = ("throughput", "latency_ms", "level", "setting", "state", "fill_alpha")
#: the names of the figure and its legend in the document (a browser finds them by name)
FIGURE_NAME, LEGEND_NAME = "tuning_plot", "tuning_legend"
#: room left above the largest value on each axis, as a fraction of it
PAD = 0.12


class MarkStyle(TypedDict, total=False):
    """How a mark is drawn: keyword arguments of Bokeh's ``figure.scatter`` (``size`` in
    screen pixels, ``fill_color`` None for a hollow mark)."""

    marker: str
    size: float
    fill_color: str | None
    line_color: str
    line_width: float


#: how the chosen point (★) is drawn
CHOSEN_STYLE: MarkStyle = {"marker": "star", "size": 20, "fill_color": "gold", "line_color": "black"}
#: the chosen point's legend entry
CHOSEN = "chosen"
#: the star's legend entry when the run kept the served config (the best stable point did not
#: beat it beyond the tolerance, or the served config's own points were unstable)
KEPT = "best stable point (not applied: served config kept)"
#: the star's legend entry when the run kept the served config because the served config's own
#: points, all unstable, measured as well (its gain could not be proven against them)
KEPT_UNSTABLE = "best stable point (not applied: the served config's unstable points did as well)"
#: how an unstable point is drawn in its legend entry (a series' points are hollow in its colour)
UNSTABLE_STYLE: MarkStyle = {"marker": "circle", "size": 9, "fill_color": None, "line_color": "grey",
                             "line_width": 2}
#: the legend entry of the hollow marks
UNSTABLE = "hollow: unstable (windows did not agree)"
#: the legend's suffix of the served config's line (``UNSTABLE_SERVED`` when none of its points was stable)
SERVED, UNSTABLE_SERVED = " (served config)", " (served config, unstable)"


def fitted_end(values: list[float]) -> float:
    """The end of an axis starting at 0 that shows every one of ``values`` with
    :data:`PAD` to spare (1 when there is nothing positive to show)."""
    top = max((v for v in values if v == v), default=0.0)  # NaN (v != v) left out
    return top * (1 + PAD) if top > 0 else 1.0


def point_row(point: Point, percentile: int) -> DataDict:
    """One point as a row of :data:`COLUMNS` (latency at ``percentile``, from µs to ms)."""
    return {"throughput": [point.throughput], "latency_ms": [point.latency_us(percentile) / 1000],
            "level": [str(point.level)], "setting": [point.setting.label],
            "state": ["stable" if point.stable else "unstable"], "fill_alpha": [1.0 if point.stable else 0.0]}


def _empty() -> dict[str, list]:
    return {column: [] for column in COLUMNS}


class TuningPlot:
    """The figure of one run and its sources.

    Args:
        shown_in: the Panel pane that shows :attr:`figure` (to push changes in a notebook).

    Attributes:
        figure: the Bokeh figure.
        sources: setting label -> its points, in the order measured.
        chosen: the chosen point (one row, or none).
        sla: the SLA line (hidden without an SLA).
        percentile: the latency percentile plotted (the goals' of the run).
    """

    def __init__(self, shown_in: pn.viewable.Viewable | None = None) -> None:
        self.shown_in = shown_in
        self.percentile = 99
        self.figure = figure(title="Throughput vs p99 latency", height=380,
                             sizing_mode="stretch_width", name=FIGURE_NAME,
                             x_range=Range1d(start=0, end=1), y_range=Range1d(start=0, end=1),
                             tools="pan,wheel_zoom,box_zoom,reset,save")
        # outside the plot area (right of it): the legend never covers a curve
        self.legend = Legend(name=LEGEND_NAME, location="top_left", click_policy="hide")
        self.figure.add_layout(self.legend, "right")
        self.figure.xaxis.axis_label = "throughput (inferences / s)"
        self.figure.yaxis.axis_label = "p99 latency (ms)"
        self.hover = HoverTool(tooltips=self._tooltips())
        self.figure.add_tools(self.hover)
        self.sources: dict[str, ColumnDataSource] = {}
        #: setting label -> its legend entry
        self._items: dict[str, LegendItem] = {}
        self.chosen = ColumnDataSource(_empty())
        self.sla = Span(location=0, dimension="width", line_dash="dashed", line_color="red",
                        visible=False)
        self.figure.add_layout(self.sla)
        self.legend.items = [self._mark(CHOSEN, self.chosen, CHOSEN_STYLE),
                             self._mark(UNSTABLE, ColumnDataSource(_empty()), UNSTABLE_STYLE)]
        #: the legend's entries of the chosen mark and of the hollow marks (kept by :meth:`reset`)
        self._mark_items = list(self.legend.items)
        #: the drawn (empty) series, each taken by a setting in turn (source, renderers, entry)
        self._slots = [self._draw(color) for color in Category10_10]

    def reset(self, percentile: int = 99, sla_ms: float | None = None) -> None:
        """Empty the plot for a new run measuring latency at ``percentile`` against
        ``sla_ms`` (**ms**, None: no SLA line): no series (their lines, points and legend
        entries go), no chosen point, axes back to fit."""
        def clear() -> None:
            slots = {slot[0] for slot in self._slots}
            extra = set(self.sources.values()) - slots
            self.figure.renderers = [r for r in self.figure.renderers
                                     if getattr(r, "data_source", None) not in extra]
            self.legend.items = list(self._mark_items)
            for source, renderers, _item in self._slots:
                source.update(name=None, data=_empty())
                for renderer in renderers:
                    renderer.visible = True  # as a click on its legend entry may have left it
            self.sources = {}
            self._items = {}
            self.chosen.data = _empty()
            self._mark_items[0].label = value(CHOSEN)
            self.percentile = percentile
            if isinstance(self.figure.title, Title):
                self.figure.title.text = f"Throughput vs p{percentile} latency"
            self.figure.yaxis.axis_label = f"p{percentile} latency (ms)"
            self.hover.tooltips = self._tooltips()
            self.sla.visible = sla_ms is not None
            self.sla.location = sla_ms or 0
            self._fit()

        self._change(clear)

    def add(self, point: Point) -> None:
        """Stream one measured point into its setting's series (drawn on first use)."""
        row = point_row(point, self.percentile)

        def stream() -> None:
            self._series(point.setting.label).stream(row)
            self._fit()

        self._change(stream)

    def mark(self, chosen: Point | None, *, kept: bool = False, served: str | None = None) -> None:
        """Star ``chosen`` (None: no star); ``kept``: the run kept the served config, so the
        star's legend entry says :data:`KEPT`, not "chosen" (a star labelled "chosen" beside
        "the gain is not proven, keeping the served config" read as a contradiction), or
        :data:`KEPT_UNSTABLE` where the served config's points were all unstable. ``served``:
        the served config's setting label; its legend entry gets :data:`SERVED` (or
        :data:`UNSTABLE_SERVED`) and its points' hover says so (a star at 790 infer/s beside the
        served config's hollow 16,550 infer/s did not say why it was kept)."""
        rows = _empty() if chosen is None else point_row(chosen, self.percentile)
        source = self.sources.get(served) if served is not None else None
        states = [] if source is None else [str(state).split(",")[0] for state in source.data["state"]]
        unstable = source is not None and "stable" not in states
        label = (CHOSEN if not kept or chosen is None else KEPT_UNSTABLE if unstable else KEPT)

        def star() -> None:
            self.chosen.data = dict(rows)
            self._mark_items[0].label = value(label)
            if served is not None and source is not None:
                suffix = UNSTABLE_SERVED if unstable else SERVED
                self._items[served].label = value(served + suffix)
                source.data = {**source.data, "state": [f"{state}, served config" for state in states]}
            self._fit()

        self._change(star)

    def _tooltips(self) -> list[tuple[str, str]]:
        return [("setting", "@setting"), ("load", "@level"), ("infer/s", "@throughput{0.0}"),
                (f"p{self.percentile} ms", "@latency_ms{0.000}"), ("windows", "@state")]

    def _change(self, change) -> None:
        change_models(self.figure, change, self.shown_in)

    def _fit(self) -> None:
        """Both axes from 0 to :func:`fitted_end` of what is plotted (the SLA line
        included); Reset goes back to this fit."""
        throughput = [v for s in self.sources.values() for v in s.data["throughput"]]
        latency = [v for s in self.sources.values() for v in s.data["latency_ms"]]
        if self.sla.visible:
            latency.append(self.sla.location)
        for axis, values in ((self.figure.x_range, throughput), (self.figure.y_range, latency)):
            end = fitted_end(values)
            axis.update(start=0, end=end, reset_start=0, reset_end=end)

    def _mark(self, label: str, source: ColumnDataSource, style: MarkStyle) -> LegendItem:
        """The marks of ``source`` drawn with ``style``, and their legend entry. BokehJS draws
        no icon in the legend for a renderer without data (the plot before a run), so the
        entry also holds a one-point copy of the style whose point is NaN: never plotted,
        never hovered, always drawn in the legend."""
        # GlyphRenderer[Any]: bokeh's stubs make the glyph type invariant, a legend item takes
        # any glyph's renderer
        marks: GlyphRenderer[Any] = self.figure.scatter("throughput", "latency_ms", source=source, **style)
        icon: GlyphRenderer[Any] = self.figure.scatter("throughput", "latency_ms", **style, source=ColumnDataSource(
            {"throughput": [float("nan")], "latency_ms": [float("nan")]}))
        return LegendItem(label=value(label), renderers=[marks, icon])

    def _draw(self, color: str) -> tuple[ColumnDataSource, tuple[GlyphRenderer[Any], ...], LegendItem]:
        """One series' (empty) source, its line and points (hollow where unstable), and its
        legend entry (not listed)."""
        source = ColumnDataSource(_empty())
        renderers: tuple[GlyphRenderer[Any], ...] = (
            self.figure.line("throughput", "latency_ms", source=source, color=color),
            self.figure.scatter("throughput", "latency_ms", source=source, line_color=color, fill_color=color,
                                fill_alpha="fill_alpha", size=9, line_width=2))
        return source, renderers, LegendItem(label=value(""), renderers=list(renderers))

    def _series(self, setting: str) -> ColumnDataSource:
        if setting not in self.sources:
            if len(self.sources) < len(self._slots):
                source, _renderers, item = self._slots[len(self.sources)]
            else:  # more settings than colours: drawn now (colours repeat)
                color = Category10_10[len(self.sources) % len(Category10_10)]
                source, _renderers, item = self._draw(color)
            # named, so a browser finds it (``Bokeh.documents[0].get_model_by_name(...)``)
            source.name = f"{SERIES_NAME}{setting}"
            item.label = value(setting)
            self._items[setting] = item
            self.legend.items = [*self.legend.items, item]
            self.sources[setting] = source
        return self.sources[setting]


__all__ = [
    "CHOSEN",
    "CHOSEN_STYLE",
    "COLUMNS",
    "FIGURE_NAME",
    "KEPT",
    "KEPT_UNSTABLE",
    "LEGEND_NAME",
    "PAD",
    "SERIES_NAME",
    "SERVED",
    "UNSTABLE",
    "UNSTABLE_SERVED",
    "TuningPlot",
    "fitted_end",
    "point_row",
]
