"""``pb_utils.MetricFamily`` / ``Metric``: a model's custom metrics (Triton's python_backend).

Each call is one message to the server over the stub's event channel, applied there to the
engine's :class:`workbench.stats.custom_metrics.CustomMetrics` (served on ``/metrics``). As in
Triton's stub (``metric.cc``, ``metric_family.cc``: every operation a ``SendMessage`` that
waits for the parent's answer), creation and ``increment`` / ``set`` / ``observe`` /
``value`` wait for the server's answer (about one event-channel round trip): an error is
raised at the line that caused it, and a value is on ``/metrics`` when the call returns
(NVIDIA's test scrapes ``/metrics`` from inside ``execute`` right after ``observe``).
Deleting a family (its last reference dropped) is sent without waiting: ``__del__`` may run
on any thread, also the stub's reader thread, which delivers the answers.

Lifetimes as Triton's: a family holds its metrics (``del metric`` alone removes nothing);
deleting a family deletes its metrics from the server, and a ``Metric`` still held then
raises "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. ...".

Texts: argument checks ("Failed to create metric. Missing required buckets.") as Triton's
stub raises them; server refusals prefixed as the stub prefixes them ("Error when creating
MetricFamily: ...", "Failed to increment metric value: ...").

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

import contextlib
import enum
import json
from typing import Any

from workbench.backends.python import pb_runtime
from workbench.backends.python.pb_args import check_str, incompatible
from workbench.backends.python.pb_tensor import TritonModelException

#: CheckIfCleared's text (python_backend ``metric.cc``)
CLEARED_TEXT = ("Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
                "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' "
                "objects have been deleted.")


class MetricKind(enum.Enum):
    """``pb_utils.MetricFamily.COUNTER`` / ``GAUGE`` / ``HISTOGRAM``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_Kind = MetricKind  # the enum by a name that the class attribute ``MetricKind`` does not hide


def _ask(action: str, prefix: str, **fields: Any) -> Any:
    """Send one metric call and wait for the server's answer.

    Raises:
        TritonModelException: outside a stub, or the server refused (``prefix`` + its text).
    """
    try:
        return pb_runtime.require().metric({"action": action, **fields})
    except TritonModelException as exc:
        raise TritonModelException(f"{prefix}{exc}") from None


def _number(function: str, value: Any) -> float:
    """``value`` as a float (pybind11 ``double``: ``int``, ``float``, numpy numbers)."""
    if isinstance(value, (int, float)) or (hasattr(value, "__float__") and not isinstance(value, (str, bytes))):
        return float(value)
    raise incompatible(function, "value", "float", value)


class Metric:
    """One label set of a family (``family.Metric(labels=..., buckets=...)``); metrics of
    equal labels share one value on the server. Created only by :meth:`MetricFamily.Metric`."""

    def __init__(self, handle: int) -> None:
        self._handle = handle
        self._cleared = False

    def increment(self, value: float) -> None:
        """Add ``value`` (a counter refuses a negative one; a histogram refuses this)."""
        self._operate("increment", "Failed to increment metric value: ", _number("increment", value))

    def set(self, value: float) -> None:
        """Set a gauge's value."""
        self._operate("set", "Failed to set metric value: ", _number("set", value))

    def observe(self, value: float) -> None:
        """Count ``value`` in a histogram."""
        self._operate("observe", "Failed to observe metric value: ", _number("observe", value))

    def value(self) -> float:
        """A counter's or gauge's current value (as every metric of these labels sees it)."""
        return float(self._operate("value", "Failed to get metric value: ", None))

    def _operate(self, action: str, prefix: str, value: float | None) -> Any:
        if self._cleared:
            raise TritonModelException(prefix + CLEARED_TEXT)
        return _ask(action, prefix, handle=self._handle, value=value)


class MetricFamily:
    """A custom metric family (Triton's ``pb_utils.MetricFamily(name, description, kind)``).

    A name that exists with the same kind gives the same family (the first description is
    kept); with another kind it is refused.

    Raises:
        TypeError: ``name`` / ``description`` not ``str`` or ``kind`` not a
            ``MetricFamily.COUNTER`` / ``GAUGE`` / ``HISTOGRAM`` (as the binding refuses them).
        TritonModelException: refused by the server ("Error when creating MetricFamily:
            Family name already exists with different type", "... Invalid metric name").
    """

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM
    MetricKind = MetricKind

    def __init__(self, name: str, description: str, kind: _Kind) -> None:
        self._handle = 0
        self._metrics: list[Metric] = []  # held, as Triton's metric_map_
        name = check_str("__init__", "name", name)
        description = check_str("__init__", "description", description)
        if not isinstance(kind, _Kind):
            raise incompatible("__init__", "kind", "a pb_utils.MetricFamily kind", kind)
        self._kind = kind
        self._handle = _ask("family_new", "Error when creating MetricFamily: ", name=name,
                            description=description, kind=kind.value)

    def Metric(self, labels: dict[str, str] | None = None,
               buckets: list[float] | None = None) -> Metric:
        """A metric of this family for ``labels`` (None: no labels); ``buckets``: a
        histogram's upper bounds, strictly increasing (``[]``: only ``+Inf``).

        Raises:
            TritonModelException: labels not a dict, buckets not a list, buckets given to a
                counter/gauge or missing for a histogram (Triton's "Failed to create metric.
                ..." texts); an invalid label name or unsorted buckets ("Error when creating
                Metric: ...").
        """
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        wire_labels = json.loads(json.dumps(labels)) or {}  # Triton passes the labels as JSON
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != _Kind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bounds: list[float] | None = [_number("Metric", b) for b in buckets]
        else:
            if self._kind == _Kind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
            bounds = None
        for value in wire_labels.values():
            if not isinstance(value, str):
                raise TritonModelException("Error when creating Metric: label values must be strings, "
                                           f"got {type(value).__name__}")
        metric = Metric(_ask("metric_new", "Error when creating Metric: ", family=self._handle,
                             labels=wire_labels, buckets=bounds))
        self._metrics.append(metric)
        return metric

    def __del__(self) -> None:
        if not self._handle:
            return
        for metric in self._metrics:
            metric._cleared = True
        runtime = pb_runtime.runtime
        if runtime is not None:
            with contextlib.suppress(Exception):  # never raise from __del__ (e.g. the server is gone)
                runtime.metric({"action": "family_delete", "handle": self._handle}, wait=False)


__all__ = ["Metric", "MetricFamily", "MetricKind"]
