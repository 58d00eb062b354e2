"""Protocol-neutral request/response types shared by the engine and every frontend.

Tensors are numpy arrays: fixed-size types as their numpy dtype (little-endian,
C order), BYTES as 1-D-or-more numpy ``object`` arrays of ``bytes``. Shapes are
tuples of ints and *include* the batch dimension when the model's
``max_batch_size > 0`` (as on the wire).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from workbench.tracing.records import RequestTrace


class ModelReadyState(enum.Enum):
    """Per-version state, as Triton's ``ModelReadyState`` / repository index reports it."""

    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass(slots=True)
class Tensor:
    """One named tensor.

    Attributes:
        name: tensor name as in the model config.
        datatype: wire name (``"FP32"``, ``"INT64"``, ``"BYTES"``...).
        data: numpy array whose shape is the full tensor shape (batch dim included).
        parameters: per-tensor protocol parameters (``binary_data``, ...), passed through.
    """

    name: str
    datatype: str
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its protocol parameters (e.g. ``binary_data``)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


class CancelSignal:
    """A request's cancellation: set once, from any thread (Triton's
    ``TRITONSERVER_InferenceRequestCancel``); what a backend registered with :meth:`on_cancel`
    then runs once, on the thread that cancelled.

    The engine cancels a request whose caller stopped waiting (a closed gRPC stream, an HTTP
    client gone, a dropped task); a BLS caller cancels its call (``ResponseIterator.cancel``).
    """

    __slots__ = ("_callbacks", "_cancelled")

    #: one lock for every signal: a request's signal is made per request and cancelled or
    #: registered with rarely, so a lock (and a callback list) per signal would be an allocation
    #: per request for nothing; the critical sections below are a few attribute operations
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] | None = None  # made by the first on_cancel

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Cancel (idempotent); runs the registered callbacks once."""
        with CancelSignal._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when cancelled (at once when already cancelled)."""
        with CancelSignal._lock:
            if not self._cancelled:
                if self._callbacks is None:
                    self._callbacks = [callback]
                else:
                    self._callbacks.append(callback)
                return
        callback()


@dataclass(slots=True)
class InferenceRequest:
    """A decoded inference request.

    Attributes:
        model_name: target model.
        model_version: version string; ``""`` (or ``"-1"``) = the version policy's latest READY version.
        inputs: tensors in request order.
        outputs: requested outputs; ``None`` = all outputs of the model.
        id: the client's request id (echoed in the response; ``""`` if none).
        parameters: request parameters (``priority``, ``timeout`` in µs, sequence flags, custom keys).
        trace: the request's trace when a frontend sampled it (``--trace-config``), else None.
        cancel: a signal the caller may cancel the running request with while it keeps
            reading its responses (a BLS ``ResponseIterator.cancel``); None: the engine makes
            one, cancelled when the caller stops waiting.
    """

    model_name: str
    inputs: list[Tensor]
    model_version: str = ""
    outputs: list[RequestedOutput] | None = None
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    trace: RequestTrace | None = None
    cancel: CancelSignal | None = None


@dataclass(slots=True)
class InferenceResponse:
    """The result of one inference request.

    Attributes:
        model_name, model_version: the model and the version that actually ran.
        outputs: output tensors, in the order requested (or model config order).
        id: the request's id.
        parameters: response parameters.
        final: False while a decoupled model may still send responses for the request
            (Triton's ``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` flag, sent over gRPC streams
            as ``triton_final_response``); always True for other models.
    """

    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    final: bool = True
