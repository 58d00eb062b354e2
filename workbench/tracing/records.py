"""One sampled request's trace records, in Triton's JSON trace shape.

A :class:`Trace` is what Triton's ``TraceManager::Trace`` is: the records of one request a
frontend sampled, and of the child traces its ensemble steps spawn, delivered together once
the frontend releases it (after the response is sent). Each :class:`RequestTrace` is one
``InferenceTrace``: an ``id`` (unique in the process, from 1), a ``parent_id`` (0 for the
top-level request; the ensemble request's id for a step) and its records:

- ``{"id", "model_name", "model_version"[, "request_id"][, "parent_id"]}`` at REQUEST_START,
- ``{"id", "timestamps": [{"name", "ns"}]}``, one per timestamp (``TIMESTAMPS`` level),
- ``{"id", "activity", "tensor": {"name", "data", "shape", "dtype"}}`` (``TENSORS`` level).

Timestamps are ``time.monotonic_ns()`` values, the clock the engine's statistics use (Triton
uses the steady clock). Records are added on the event loop only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from workbench.common.datatypes import wire_name
from workbench.common.errors import InvalidArgument

#: one record of Triton's trace file (a JSON object)
Record = dict[str, Any]
#: where a released trace's records go (a trace file setting or the OpenTelemetry exporter)
TraceSink = Callable[[list[Record]], None]

#: trace ids, unique in the process (Triton's static ``InferenceTrace::next_id_``)
_IDS = itertools.count(1)


class Trace:
    """The records of one sampled request and its child traces.

    Args:
        sink: called once with every record when the trace is released.
        timestamps: the ``TIMESTAMPS`` level is on (timestamps and the REQUEST_START header).
        tensors: the ``TENSORS`` level is on (input and output tensors).

    Attributes:
        root: the top-level request's :class:`RequestTrace` (the frontend's).
        records: the records so far, in the order they were reported.
    """

    __slots__ = ("_released", "_sink", "records", "root", "tensors", "timestamps")

    def __init__(self, sink: TraceSink, timestamps: bool, tensors: bool) -> None:
        self._sink = sink
        self._released = False
        self.timestamps = timestamps
        self.tensors = tensors
        self.records: list[Record] = []
        self.root = RequestTrace(self, next(_IDS), 0)

    def release(self) -> None:
        """Hand the records to the sink (once; later calls do nothing)."""
        if not self._released:
            self._released = True
            self._sink(self.records)


class RequestTrace:
    """One request's part of a :class:`Trace` (Triton's ``InferenceTrace``)."""

    __slots__ = ("id", "parent_id", "trace")

    def __init__(self, trace: Trace, id_: int, parent_id: int) -> None:
        self.trace = trace
        self.id = id_
        self.parent_id = parent_id

    def stamp(self, name: str, ns: int) -> None:
        """Record timestamp ``name`` (``HTTP_RECV_START``, ``QUEUE_START``...) at ``ns``."""
        if self.trace.timestamps:
            self.trace.records.append({"id": self.id, "timestamps": [{"name": name, "ns": ns}]})

    def start(self, model: str, version: int, request_id: str, ns: int) -> None:
        """The request reached ``model`` version ``version``: the header record and
        ``REQUEST_START`` (both at the ``TIMESTAMPS`` level only, as Triton's)."""
        if not self.trace.timestamps:
            return
        header: Record = {"id": self.id, "model_name": model, "model_version": version}
        if request_id:
            header["request_id"] = request_id
        if self.parent_id:
            header["parent_id"] = self.parent_id
        self.trace.records.append(header)
        self.stamp("REQUEST_START", ns)

    def computed(self, start_ns: int, input_end_ns: int, output_start_ns: int, end_ns: int) -> None:
        """The execution's ``COMPUTE_START``, ``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``
        and ``COMPUTE_END`` (the times the statistics' compute durations come from)."""
        self.stamp("COMPUTE_START", start_ns)
        self.stamp("COMPUTE_INPUT_END", input_end_ns)
        self.stamp("COMPUTE_OUTPUT_START", output_start_ns)
        self.stamp("COMPUTE_END", end_ns)

    def report_tensors(self, activity: str, arrays: Mapping[str, np.ndarray],
                       names: Any = None) -> None:
        """One ``activity`` record (``TENSOR_QUEUE_INPUT``, ``TENSOR_BACKEND_OUTPUT``) per
        tensor of ``arrays`` (all, or those in ``names``), at the ``TENSORS`` level only."""
        if not self.trace.tensors:
            return
        for name in arrays if names is None else names:
            array = arrays.get(name)
            record = tensor_record(name, array) if array is not None else None
            if record is not None:
                self.trace.records.append({"id": self.id, "activity": activity, "tensor": record})

    def spawn(self) -> RequestTrace:
        """A child trace of this one (an ensemble step's request), in the same :class:`Trace`."""
        return RequestTrace(self.trace, next(_IDS), self.id)

    def release(self) -> None:
        """Release the whole trace (the frontend, after sending the response)."""
        self.trace.release()


def tensor_record(name: str, array: np.ndarray) -> Record | None:
    """Triton's ``tensor`` object: ``data`` the elements comma-separated (C++ stream
    formatting: floats with 6 significant digits, BOOL as 1/0, BYTES elements quoted),
    ``shape`` the dims comma-separated, ``dtype`` the wire datatype. FP16 and BF16 data is
    left empty, as Triton leaves it. None for an array with no Triton datatype (Triton
    skips an INVALID one)."""
    try:
        dtype = wire_name(array)
    except InvalidArgument:
        return None
    flat = array.reshape(-1)
    if dtype == "FP16":
        data = ""
    elif dtype in ("FP32", "FP64"):
        data = ",".join(format(value, "g") for value in flat.tolist())
    elif dtype == "BOOL":
        data = ",".join("1" if value else "0" for value in flat.tolist())
    elif dtype == "BYTES":
        data = ",".join('"' + _text(value) + '"' for value in flat.tolist())
    else:
        data = ",".join(str(value) for value in flat.tolist())
    return {"name": name, "data": data, "shape": ",".join(str(d) for d in array.shape), "dtype": dtype}


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


__all__ = ["Record", "RequestTrace", "Trace", "TraceSink", "tensor_record"]
