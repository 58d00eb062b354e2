"""The result of a tuning run: every point, the recommendation and why, and its exports.

:class:`TuneResult` renders itself as the report in a notebook cell (``_repr_html_``: the
Pareto plot of throughput against latency with every point, the chosen one marked, the
reasoning, the table), and exports the same as HTML (:meth:`TuneResult.html`), CSV
(:meth:`TuneResult.csv_text`, one row per point) and JSON (:meth:`TuneResult.as_dict`, what
``workbench tune --json`` writes). Latencies are **ms** in the table and the plot, **µs** in
the JSON and CSV (perf_analyzer's unit).
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from workbench.tuning.batch_model import BatchModel
from workbench.tuning.decide import Decision
from workbench.tuning.goals import Goals
from workbench.tuning.machine import Machine, SpeedProbe
from workbench.tuning.memory import MemoryEstimate
from workbench.tuning.points import Point, meets
from workbench.tuning.space import SearchSpace


@dataclass
class TuneResult:
    """Everything a run found.

    Attributes:
        model: the tuned model; ``target``: where it was measured (in process, or a URL
            "over the network").
        strategy, space, goals: what was searched for.
        points: every point, in the order measured.
        decision: the recommendation (:class:`~workbench.tuning.decide.Decision`).
        machine, probes: the machine, and a speed probe at the start and the end.
        memory_mb: the host memory each setting's instances take by the estimate
            (``per-instance × instances``), **MiB**, what the host budget is checked against;
            ``rss_mb``: the serving process's RSS after each setting's load (the readings the
            estimate fits); ``gpu_memory_mb``: the process's GPU memory after each load (empty
            without a GPU); ``memory``: the per-instance estimate and its method.
        batch_model: the fitted compute model (None: not enough variety).
        failures: settings that failed to load or measure, and why; ``skipped``: settings
            left out, and why.
        windows: measurement windows run; ``wall_s``: the run's duration, **s**;
            ``stopped``: the run was stopped before the strategy finished.
        config_text: the tuned model's ``config.pbtxt`` with the chosen knobs (comments
            kept), when a config change is recommended and the file was readable.
    """

    model: str
    target: str
    strategy: str
    space: SearchSpace
    goals: Goals
    points: list[Point]
    decision: Decision
    machine: Machine
    probes: list[SpeedProbe]
    memory_mb: Mapping[str, float | None] = field(default_factory=dict)
    rss_mb: Mapping[str, float | None] = field(default_factory=dict)
    gpu_memory_mb: Mapping[str, float | None] = field(default_factory=dict)
    memory: MemoryEstimate | None = None
    batch_model: BatchModel | None = None
    failures: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    windows: int = 0
    wall_s: float = 0.0
    stopped: bool = False
    config_text: str | None = None

    @property
    def chosen(self) -> Point | None:
        return self.decision.chosen

    @property
    def measurements(self) -> int:
        """Points measured in this run (those read from a resume file excluded)."""
        return sum(not p.from_resume for p in self.points)

    def pareto(self) -> list[Point]:
        """The stable points no other stable point beats in both throughput and latency at
        the goals' percentile, by increasing throughput."""
        stable = [p for p in self.points if p.stable and not p.errors]
        pct = self.goals.percentile
        front = [p for p in stable if not any(
            o.throughput >= p.throughput and o.latency_us(pct) <= p.latency_us(pct)
            and (o.throughput > p.throughput or o.latency_us(pct) < p.latency_us(pct)) for o in stable)]
        return sorted(front, key=lambda p: p.throughput)

    def rows(self) -> list[dict]:
        """One row per point for tables and the CSV (latencies **µs**)."""
        pct = self.goals.percentile
        pareto = {id(p) for p in self.pareto()}
        out = []
        for p in self.points:
            fails = meets(p, self.goals, self.memory_mb.get(p.setting.label), self.gpu_memory_mb.get(p.setting.label))
            out.append({
                "setting": p.setting.label, "mode": p.level.mode, "level": p.level.value,
                "throughput_infer_per_s": round(p.throughput, 2),
                f"p{pct}_us": round(p.latency_us(pct)), "p50_us": round(p.latency_us(50)),
                "goodput_infer_per_s": None if p.goodput is None else round(p.goodput, 2),
                "stable": p.stable, "deviation_pct": round(p.deviation_pct(pct), 1),
                "spread_pct": round(max(p.throughput_spread_pct, p.latency_spread_pct), 1),
                "windows": len(p.windows), "errors": p.errors,
                "avg_batch": None if p.avg_batch() is None else round(p.avg_batch() or 0, 2),
                "memory_mb": _round(self.memory_mb.get(p.setting.label)),
                "cpu_ms_per_inference": (None if p.cpu_s_per_inference is None
                                         else round(p.cpu_s_per_inference * 1000, 3)),
                "probe_kops": None if p.probe is None else round(p.probe, 1),
                "meets_goals": not fails, "why_not": "; ".join(fails),
                "pareto": id(p) in pareto, "chosen": p is self.chosen,
            })
        return out

    def csv_text(self) -> str:
        rows = self.rows()
        if not rows:
            return ""
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    def as_dict(self) -> dict:
        """The JSON ``workbench tune --json`` writes."""
        chosen = self.chosen
        return {
            "model": self.model, "target": self.target, "strategy": self.strategy,
            "space": self.space.as_dict(), "goals": self.goals.as_dict(),
            "machine": self.machine.as_dict(), "probes": [p.as_dict() for p in self.probes],
            "wall_s": round(self.wall_s, 2), "measurements": self.measurements, "windows": self.windows,
            "stopped": self.stopped,
            "chosen": None if chosen is None else chosen.as_dict(self.goals),
            "apply": self.decision.apply, "why": self.decision.why,
            "baseline": None if self.decision.baseline is None else self.decision.baseline.as_dict(self.goals),
            "memory": None if self.memory is None else self.memory.as_dict(),
            "memory_mb": {k: _round(v) for k, v in self.memory_mb.items()},
            "rss_mb": {k: _round(v) for k, v in self.rss_mb.items()},
            "gpu_memory_mb": {k: _round(v) for k, v in self.gpu_memory_mb.items()},
            "batch_model": None if self.batch_model is None else self.batch_model.as_dict(),
            "failures": dict(self.failures), "skipped": dict(self.skipped),
            "config_text": self.config_text,
            "points": [p.as_dict(self.goals) for p in self.points],
        }

    def json_text(self) -> str:
        return json.dumps(self.as_dict(), indent=1)

    def summary(self) -> str:
        """A few lines for a terminal."""
        lines = [f"{self.model} on {self.target}: {self.strategy} search, {self.measurements} points "
                 f"({self.windows} windows) in {self.wall_s:.0f} s{' (stopped)' if self.stopped else ''}",
                 f"goals: {self.goals.text()}", f"machine: {self.machine.text()}"]
        if self.probes:
            lines.append("speed probe: " + ", ".join(f"{p.time_utc} {p.kloops_per_s:,.0f} k loops/s (load "
                                                     f"{p.loadavg_1m:.2f})" for p in self.probes))
        if self.memory is not None:
            lines.append(f"memory: {self.memory.base_mb:,.0f} MiB + {self.memory.per_instance_mb:,.1f} MiB "
                         f"per instance ({self.memory.method})")
        if self.batch_model is not None:
            lines.append(self.batch_model.text())
        lines.append(("RECOMMENDED: " if self.decision.apply else "result: ") + self.decision.why)
        return "\n".join(lines)

    # ------------------------------------------------------------------ HTML
    def html(self, title: str | None = None) -> str:
        """A standalone HTML report (no script, no network: an inline SVG plot)."""
        body = self._repr_html_()
        name = html.escape(title or f"workbench tune: {self.model}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{name}</title>"
                "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
                "font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                "td:first-child{text-align:left}</style></head>"
                f"<body><h1>{name}</h1>{body}</body></html>")

    def _repr_html_(self) -> str:
        esc = html.escape
        verdict = "Recommended" if self.decision.apply else "Result"
        parts = [f"<p><b>{verdict}:</b> {esc(self.decision.why)}</p>",
                 f"<p>{esc(self.summary().split(chr(10))[0])}<br>goals: {esc(self.goals.text())}<br>"
                 f"machine: {esc(self.machine.text())}</p>", pareto_svg(self)]
        if self.config_text and self.decision.apply:
            parts.append(f"<details><summary>config.pbtxt with the chosen knobs</summary><pre>"
                         f"{esc(self.config_text)}</pre></details>")
        rows = self.rows()
        if rows:
            heads = ["setting", "level", "throughput_infer_per_s", f"p{self.goals.percentile}_us",
                     "stable", "deviation_pct", "windows", "avg_batch", "memory_mb", "probe_kops",
                     "meets_goals", "why_not"]
            table = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in heads) + "</tr>"]
            for row in rows:
                style = " style='font-weight:bold;background:#e8f5e9'" if row["chosen"] else ""
                table.append(f"<tr{style}>" + "".join(f"<td>{esc(str(row[h]))}</td>" for h in heads) + "</tr>")
            parts.append("".join(table) + "</table>")
        for title, items in (("Failed", self.failures), ("Skipped", self.skipped)):
            if items:
                listed = "; ".join(f"{esc(k)}: {esc(v)}" for k, v in items.items())
                parts.append(f"<p><b>{title}:</b> {listed}</p>")
        return "\n".join(parts)


def pareto_svg(result: TuneResult, width: int = 560, height: int = 320) -> str:
    """Throughput (x) against latency at the goals' percentile (y, ms) as an inline SVG:
    every point (hollow when unstable), the Pareto front joined, the chosen point as a star,
    the SLA as a dashed line."""
    points = result.points
    if not points:
        return "<p><i>no points</i></p>"
    pct = result.goals.percentile
    xs = [p.throughput for p in points]
    ys = [p.latency_us(pct) / 1000 for p in points]
    sla = result.goals.sla_ms
    x_max = max(xs) * 1.1 or 1
    y_max = max([*ys, sla or 0]) * 1.15 or 1
    left, bottom, top, right = 56, 36, 12, 12

    def sx(v: float) -> float:
        return left + v / x_max * (width - left - right)

    def sy(v: float) -> float:
        return height - bottom - v / y_max * (height - bottom - top)

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           "font-family='sans-serif' font-size='11'>",
           f"<line x1='{left}' y1='{height - bottom}' x2='{width - right}' y2='{height - bottom}' stroke='#333'/>",
           f"<line x1='{left}' y1='{top}' x2='{left}' y2='{height - bottom}' stroke='#333'/>",
           f"<text x='{(left + width) / 2}' y='{height - 6}' text-anchor='middle'>throughput (infer/s)</text>",
           f"<text x='14' y='{(top + height - bottom) / 2}' text-anchor='middle' "
           f"transform='rotate(-90 14 {(top + height - bottom) / 2})'>p{pct} latency (ms)</text>"]
    for i in range(5):
        xv, yv = x_max * i / 4, y_max * i / 4
        out.append(f"<text x='{sx(xv)}' y='{height - bottom + 14}' text-anchor='middle'>{xv:.0f}</text>")
        out.append(f"<text x='{left - 4}' y='{sy(yv) + 4}' text-anchor='end'>{yv:.1f}</text>")
    if sla is not None:
        out.append(f"<line x1='{left}' x2='{width - right}' y1='{sy(sla)}' y2='{sy(sla)}' stroke='red' "
                   f"stroke-dasharray='5,4'/><text x='{width - right}' y='{sy(sla) - 4}' fill='red' "
                   f"text-anchor='end'>SLA {sla:g} ms</text>")
    front = result.pareto()
    if len(front) > 1:
        path = " ".join(f"{sx(p.throughput):.1f},{sy(p.latency_us(pct) / 1000):.1f}" for p in front)
        out.append(f"<polyline points='{path}' fill='none' stroke='#1f77b4' stroke-width='1.5'/>")
    for p, x, y in zip(points, xs, ys, strict=True):
        fill = "#1f77b4" if p.stable else "none"
        tip = html.escape(f"{p.setting.label} at {p.level}: {x:.1f} infer/s, p{pct} {y:.2f} ms"
                          f"{'' if p.stable else ' (unstable)'}")
        out.append(f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='4' fill='{fill}' stroke='#1f77b4'>"
                   f"<title>{tip}</title></circle>")
    chosen = result.chosen
    if chosen is not None:
        cx, cy = sx(chosen.throughput), sy(chosen.latency_us(pct) / 1000)
        out.append(f"<text x='{cx:.1f}' y='{cy + 5:.1f}' text-anchor='middle' font-size='18' fill='#d62728'>★"
                   f"<title>chosen: {html.escape(chosen.setting.label)}</title></text>")
    out.append("</svg>")
    return "".join(out)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def write_exports(result: TuneResult, json_path: str | None = None, csv_path: str | None = None,
                  html_path: str | None = None) -> None:
    """Write the exports that have a path."""
    for path, text in ((json_path, result.json_text), (csv_path, result.csv_text), (html_path, result.html)):
        if path:
            with open(path, "w") as f:
                f.write(text())


__all__ = ["TuneResult", "pareto_svg", "write_exports"]
