"""The Live tab's overlay lines: the versions of the chosen model, or (attached to several
replicas) the chosen version on each replica, on the same axes (throughput, p50 / p99, queue
vs compute), one line per version or replica and figure, named in the legend.

Pure functions of the kept samples: :class:`~workbench.ui.live.live_view.LiveView` puts what they
return into its ``multi_line`` sources on each tick.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from workbench.serving.live_stats import LiveSample

#: the colours of the lines, in version (or replica) order
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
#: the latest rows per line the overlay redraws each tick (its lines are replaced, not
#: streamed: this bounds what a tick sends to the browser)
OVERLAY_ROWS = 120
#: per overlay figure: the LiveSample fields drawn (one line per version each) and their labels
OVERLAY_FIELDS = {
    "versions_throughput": (("inferences_per_s", ""),),
    "versions_latency": (("p50_us", " p50"), ("p99_us", " p99")),
    "versions_queue_compute": (("queue_us", " queue"), ("compute_us", " compute")),
}
#: the overlay figures' titles by what they overlay ("versions" or "replicas"), by figure key
OVERLAY_TITLES = {
    "versions": {"versions_throughput": "Versions: throughput",
                 "versions_latency": "Versions: p50 / p99 in the server",
                 "versions_queue_compute": "Versions: queue vs compute (mean per request)"},
    "replicas": {"versions_throughput": "Replicas: throughput",
                 "versions_latency": "Replicas: p50 / p99 in the server",
                 "versions_queue_compute": "Replicas: queue vs compute (mean per request)"},
}

Lines = dict[str, dict[str, list]]


def overlay_lines(named: Iterable[tuple[str, list[LiveSample] | None]]) -> Lines:
    """Per overlay figure, the ``multi_line`` columns (``xs`` in ms since the epoch, ``ys``,
    ``label``, ``color``) of each ``(name, samples)``: one line per name and field, labelled
    ``name`` (``name p50``, ...); samples None: the name is in the legend as
    ``name: not loaded`` with no points (a replica that does not serve the version)."""
    lines: Lines = {key: {"xs": [], "ys": [], "label": [], "color": []} for key in OVERLAY_FIELDS}
    for index, (name, samples) in enumerate(named):
        kept = (samples or [])[-OVERLAY_ROWS:]
        times = [sample.time * 1000 for sample in kept]
        color = COLORS[index % len(COLORS)]
        for figure_key, fields in OVERLAY_FIELDS.items():
            for position, (field_name, suffix) in enumerate(fields):
                if samples is None and position:
                    continue  # "not loaded" once per figure
                line = lines[figure_key]
                line["xs"].append(times)
                line["ys"].append([_value(sample, field_name) for sample in kept])
                line["label"].append(f"{name}: not loaded" if samples is None else f"{name}{suffix}")
                line["color"].append(_darker(color) if suffix in (" p99", " compute") else color)
    return lines


def version_lines(history: Mapping[tuple[str, str], Iterable[LiveSample]], model: str) -> Lines:
    """Every kept version of ``model``, in version order, named ``v<version>``."""
    keys = sorted((k for k in history if k[0] == model), key=lambda k: (len(k[1]), k[1]))
    return overlay_lines((f"v{version}", list(history[(name, version)])) for name, version in keys)


def replica_lines(replicas: Mapping[str, Mapping[tuple[str, str], Iterable[LiveSample]]],
                  urls: Iterable[str], key: tuple[str, str]) -> Lines:
    """The version ``key`` on each replica (by URL, in ``urls``' order; behind a cluster's
    ingress ``<url> replica <id>``), named by its ``host:port`` (``host:port replica <id>``);
    a replica with samples of other versions but none of ``key``: not loaded
    there; a replica not read yet: an empty line under its name."""
    named: list[tuple[str, list[LiveSample] | None]] = []
    for url in urls:
        kept = replicas.get(url)
        samples = None if kept and key not in kept else list((kept or {}).get(key, ()))
        named.append((url.split("://", 1)[-1], samples))
    return overlay_lines(named)


def _value(sample: LiveSample, field_name: str) -> float:
    """An overlay point: infer/s, or a latency in ms (NaN while idle or in an in-process
    sweep's interval, as in the network plots)."""
    if sample.in_process:
        return 0.0 if field_name == "inferences_per_s" else math.nan
    if field_name == "inferences_per_s":
        return sample.inferences_per_s
    value = getattr(sample, field_name)
    return math.nan if value is None else value / 1000


def _darker(color: str) -> str:
    """``#rrggbb`` at 60 % brightness (a line's second part in a figure: p99, compute)."""
    red, green, blue = (int(color[i:i + 2], 16) * 6 // 10 for i in (1, 3, 5))
    return f"#{red:02x}{green:02x}{blue:02x}"


__all__ = ["COLORS", "OVERLAY_FIELDS", "OVERLAY_ROWS", "OVERLAY_TITLES", "overlay_lines", "replica_lines",
           "version_lines"]
