"""Custom metrics: the families Python models create with ``pb_utils.MetricFamily``.

As in Triton they are scraped from the server's ``/metrics``: the engine owns one
:class:`CustomMetrics` (``Server.custom_metrics``), the Python backend applies its stubs'
calls to it (over each stub's event channel, ``workbench.backends.python.pb_metrics``), and
the metrics frontend appends :meth:`CustomMetrics.render` to every scrape.

Semantics of Triton's core (``metric_family.cc``) over prometheus-cpp: a family is (name,
kind, help), created again with the same kind it is the same family, another kind is refused
("Family name already exists with different type"); a metric is a family's child for one
label set, shared by every handle and counted by reference, leaving the scrape with its last
handle (so does a family without children). Handles belong to the stub that created them;
deleting a family handle deletes its metric handles, and :meth:`CustomMetrics.release` drops
every handle of an exited stub. Beyond Triton: a family with no handle left is forgotten, and
``nv_`` / ``workbench_`` names are refused. Exposition as prometheus-cpp's text serializer
(labels sorted; a histogram's ``_count``, ``_sum`` then ``_bucket`` lines; shortest numbers).
Thread-safe (stubs' reader threads apply calls while the loop renders). Docs:
docs/python-backend.md, "Custom metrics"."""

from __future__ import annotations

import bisect
import enum
import itertools
import math
import re
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: family name prefixes of the server's own metrics (refused for custom families)
RESERVED_PREFIXES = ("nv_", "workbench_")

Labels = tuple[tuple[str, str], ...]


class MetricKind(enum.IntEnum):
    """``pb_utils.MetricFamily.COUNTER`` / ``GAUGE`` / ``HISTOGRAM`` (python_backend's values)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class CustomMetricError(Exception):
    """A call refused, with Triton's text (the core's or prometheus-cpp's)."""


@dataclass
class _Child:
    """One label set's value: a number, or a histogram's buckets, counts and sum."""

    buckets: tuple[float, ...] = ()
    value: float = 0.0
    counts: list[int] = field(default_factory=list)
    count: int = 0
    refs: int = 0


@dataclass
class _Family:
    name: str
    help: str
    kind: MetricKind
    children: dict[Labels, _Child] = field(default_factory=dict)
    handles: int = 0


@dataclass(frozen=True)
class _Handle:
    owner: Hashable
    family: _Family
    labels: Labels | None = None  # None: a family handle
    parent: int = 0  # a metric handle: the family handle it was created through


class CustomMetrics:
    """The server's custom metric families (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._handles: dict[int, _Handle] = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ families
    def family_new(self, owner: Hashable, name: str, description: str, kind: int) -> int:
        """A handle on the family ``name`` (created, or the existing one of that kind).

        Raises:
            CustomMetricError: ``name`` exists with another kind, is not a valid metric name
                ("Invalid metric name"), or is reserved; ``kind`` is unknown.
        """
        try:
            kind = MetricKind(kind)
        except ValueError:
            raise CustomMetricError("Unknown metric kind") from None
        if name.startswith(RESERVED_PREFIXES):
            raise CustomMetricError(f"metric family name '{name}' is reserved for the server's own "
                                    f"metrics ({', '.join(p + '*' for p in RESERVED_PREFIXES)})")
        with self._lock:
            family = self._families.get(name)
            if family is not None and family.kind != kind:
                raise CustomMetricError("Family name already exists with different type")
            if family is None:
                if not _METRIC_NAME.fullmatch(name):
                    raise CustomMetricError("Invalid metric name")
                family = self._families[name] = _Family(name, description, kind)
            family.handles += 1
            handle = next(self._ids)
            self._handles[handle] = _Handle(owner, family)
            return handle

    def family_delete(self, owner: Hashable, handle: int) -> None:
        """Delete a family handle and every metric handle created through it."""
        with self._lock:
            for child in [h for h, v in self._handles.items() if v.parent == handle and v.owner == owner]:
                self._delete_locked(child)
            if handle in self._handles and self._handles[handle].owner == owner:
                self._delete_locked(handle)

    # ------------------------------------------------------------------ metrics
    def metric_new(self, owner: Hashable, family_handle: int, labels: dict[str, str],
                   buckets: list[float] | None) -> int:
        """A handle on the child of ``labels`` (created, or the existing one: its buckets
        stay).

        Raises:
            CustomMetricError: an invalid label name ("Invalid label name": not
                ``[a-zA-Z_][a-zA-Z0-9_]*``, starting ``__``, or ``le`` in a histogram),
                buckets not strictly increasing ("Bucket Boundaries must be strictly sorted"),
                buckets given to / missing from the family's kind (Triton's core texts), an
                unknown family handle.
        """
        with self._lock:
            family = self._family_locked(owner, family_handle)
            if family.kind == MetricKind.HISTOGRAM and buckets is None:
                raise CustomMetricError("Bucket boundaries not found in Metric args.")
            if family.kind != MetricKind.HISTOGRAM and buckets is not None:
                kind = "counter" if family.kind == MetricKind.COUNTER else "gauge"
                raise CustomMetricError(f"Unexpected args found in {kind} Metric constructor.")
            key: Labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
            child = family.children.get(key)
            if child is None:
                for name, _ in key:
                    if (not _LABEL_NAME.fullmatch(name) or name.startswith("__")
                            or (family.kind == MetricKind.HISTOGRAM and name == "le")):
                        raise CustomMetricError("Invalid label name")
                bounds = tuple(float(b) for b in buckets or ())
                if any(a >= b for a, b in itertools.pairwise(bounds)):
                    raise CustomMetricError("Bucket Boundaries must be strictly sorted")
                child = family.children[key] = _Child(bounds, counts=[0] * (len(bounds) + 1))
            child.refs += 1
            handle = next(self._ids)
            self._handles[handle] = _Handle(owner, family, key, family_handle)
            return handle

    def increment(self, owner: Hashable, handle: int, value: float) -> None:
        """Add ``value`` (a gauge may go down; a counter may not).

        Raises:
            CustomMetricError: a counter and ``value < 0``, or a histogram (Triton's texts).
        """
        with self._lock:
            family, child = self._child_locked(owner, handle, "increment")
            if family.kind == MetricKind.HISTOGRAM:
                raise CustomMetricError("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment")
            if family.kind == MetricKind.COUNTER and value < 0:
                raise CustomMetricError("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                                        "monotonically by non-negative values.")
            child.value += value

    def set(self, owner: Hashable, handle: int, value: float) -> None:
        """Set a gauge.

        Raises:
            CustomMetricError: not a gauge (Triton's "... does not support Set").
        """
        with self._lock:
            family, child = self._child_locked(owner, handle, "set")
            if family.kind != MetricKind.GAUGE:
                raise CustomMetricError(f"TRITONSERVER_METRIC_KIND_{family.kind.name} does not support Set")
            child.value = value

    def observe(self, owner: Hashable, handle: int, value: float) -> None:
        """Count ``value`` in a histogram (bucket ``le`` bounds are inclusive).

        Raises:
            CustomMetricError: not a histogram (Triton's "... does not support Observe").
        """
        with self._lock:
            family, child = self._child_locked(owner, handle, "observe")
            if family.kind != MetricKind.HISTOGRAM:
                raise CustomMetricError(f"TRITONSERVER_METRIC_KIND_{family.kind.name} does not support Observe")
            child.counts[bisect.bisect_left(child.buckets, value)] += 1
            child.count += 1
            child.value += value

    def value(self, owner: Hashable, handle: int) -> float:
        """A counter's or gauge's value.

        Raises:
            CustomMetricError: a histogram ("... does not support Value").
        """
        with self._lock:
            family, child = self._child_locked(owner, handle, "get")
            if family.kind == MetricKind.HISTOGRAM:
                raise CustomMetricError("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")
            return child.value

    def metric_delete(self, owner: Hashable, handle: int) -> None:
        """Delete a metric handle (its child leaves the scrape with its last handle)."""
        with self._lock:
            if handle in self._handles and self._handles[handle].owner == owner:
                self._delete_locked(handle)

    def apply(self, owner: Hashable, call: dict) -> float | int | None:
        """One call of a stub's ``pb_utils`` (a message of ``pb_metrics``): ``action`` is
        ``family_new`` (``name``, ``description``, ``kind``), ``family_delete``
        (``handle``), ``metric_new`` (``family``, ``labels``, ``buckets``), ``increment`` /
        ``set`` / ``observe`` (``handle``, ``value``) or ``value`` (``handle``). Returns the
        new handle, the value, or None.

        Raises:
            CustomMetricError: refused (the method's texts), or an unknown action.
        """
        action = call.get("action")
        if action == "family_new":
            return self.family_new(owner, str(call["name"]), str(call["description"]), int(call["kind"]))
        if action == "family_delete":
            self.family_delete(owner, int(call["handle"]))
            return None
        if action == "metric_new":
            return self.metric_new(owner, int(call["family"]), dict(call["labels"]), call["buckets"])
        if action in ("increment", "set", "observe"):
            return getattr(self, action)(owner, int(call["handle"]), float(call["value"]))
        if action == "value":
            return self.value(owner, int(call["handle"]))
        raise CustomMetricError(f"Unknown metric request kind '{action}'")

    # ------------------------------------------------------------------ owners, scrape
    def release(self, owner: Hashable) -> None:
        """Delete every handle ``owner`` holds (its stub exited): metrics, then families."""
        with self._lock:
            owned = sorted((h for h, v in self._handles.items() if v.owner == owner),
                           key=lambda h: self._handles[h].labels is None)
            for handle in owned:
                self._delete_locked(handle)

    def handle_count(self) -> int:
        """Live handles (families and metrics), all owners."""
        with self._lock:
            return len(self._handles)

    def render(self) -> str:
        """The families with at least one child, in the Prometheus text format 0.0.4."""
        lines: list[str] = []
        with self._lock:
            for family in self._families.values():
                if family.children:
                    _write_family(lines, family)
        return "".join(lines)

    # ------------------------------------------------------------------ internals
    def _family_locked(self, owner: Hashable, handle: int) -> _Family:
        entry = self._handles.get(handle)
        if entry is None or entry.owner != owner or entry.labels is not None:
            raise CustomMetricError("Could not create metric. Metric family has been invalidated.")
        return entry.family

    def _child_locked(self, owner: Hashable, handle: int, verb: str) -> tuple[_Family, _Child]:
        entry = self._handles.get(handle)
        if entry is None or entry.owner != owner or entry.labels is None:
            raise CustomMetricError(f"Could not {verb} metric value. Metric has been invalidated.")
        return entry.family, entry.family.children[entry.labels]

    def _delete_locked(self, handle: int) -> None:
        entry = self._handles.pop(handle)
        family = entry.family
        if entry.labels is None:
            family.handles -= 1
            if family.handles == 0 and self._families.get(family.name) is family:
                del self._families[family.name]
            return
        child = family.children.get(entry.labels)
        if child is not None:
            child.refs -= 1
            if child.refs == 0:
                del family.children[entry.labels]


def format_value(value: float) -> str:
    """A number as prometheus-cpp writes it: shortest round-trip form, integers without
    ``.0`` (``0``, ``2023``, ``7.55``, ``1e+20``), ``+Inf`` / ``-Inf`` / ``Nan``."""
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))


def _label_text(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _write_family(lines: list[str], family: _Family) -> None:
    name = family.name
    if family.help:
        lines.append(f"# HELP {name} {_escape_help(family.help)}\n")
    lines.append(f"# TYPE {name} {family.kind.name.lower()}\n")
    for labels, child in family.children.items():
        if family.kind != MetricKind.HISTOGRAM:
            lines.append(f"{name}{_label_text(labels)} {format_value(child.value)}\n")
            continue
        lines.append(f"{name}_count{_label_text(labels)} {child.count}\n")
        lines.append(f"{name}_sum{_label_text(labels)} {format_value(child.value)}\n")
        cumulative = 0
        for bound, count in zip((*child.buckets, math.inf), child.counts, strict=True):
            cumulative += count
            le = f'le="{format_value(bound)}"'
            lines.append(f"{name}_bucket{_label_text(labels, le)} {cumulative}\n")


__all__ = ["RESERVED_PREFIXES", "CustomMetricError", "CustomMetrics", "MetricKind", "format_value"]
