"""``triton_python_backend_utils``: the module Triton Python models import as ``pb_utils``.

The stub installs this module as ``sys.modules["triton_python_backend_utils"]`` before it
imports ``model.py``, so unmodified Triton models run here. It follows the API of Triton's
python_backend (``src/resources/triton_python_backend_utils.py`` plus the C++-bound classes
``Tensor``, ``InferenceRequest``, ``InferenceResponse``, ``TritonError``, ``Logger``,
response senders and ``ModelConfig`` for ``auto_complete_config``); see TRITON_COMPAT §12.
Tensors, errors and datatype helpers live in :mod:`.pb_tensor`, the ``ModelConfig`` of
``auto_complete_config`` in :mod:`.model_config`, ``Logger`` in :mod:`.pb_log`; all are
re-exported here. Constructors check their arguments as Triton's pybind11 bindings do
(:mod:`.pb_args`): ``TypeError`` for a wrong type, ``TritonModelException`` with Triton's
text for a None tensor in a list or bad ``parameters``.

Calls that leave the stub (BLS ``exec`` / ``async_exec``, ``ResponseSender.send``,
``Logger``) go through :data:`.pb_runtime.runtime`, which the stub sets; outside a stub BLS and
senders raise :class:`TritonModelException` and the logger prints to stderr.

Cancellation: ``is_cancelled()`` of a request and of its response sender turn True once the
engine cancelled the request (the stub is told; see :mod:`.instance`), and
``ResponseIterator.cancel()`` cancels a decoupled BLS call.

Request rescheduling: ``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``
hands the request back to its model's scheduler when ``execute`` returns (the stub reports the
flags; see :mod:`.instance` and Triton's iterative sequences in
:mod:`workbench.scheduling.sequence_batcher`).

Custom metrics: ``MetricFamily`` (:mod:`.pb_metrics`), exported on the server's ``/metrics``.

Model control from a model (``load_model`` / ``unload_model`` / ``is_model_ready``) is
:mod:`.pb_control`, re-exported here.

Not provided: GPU tensors.

This module runs inside the stub process: numpy and the standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from workbench.backends.python import pb_runtime
from workbench.backends.python.model_config import ModelConfig
from workbench.backends.python.pb_args import check_int, check_list, check_str, incompatible, parameters_json
from workbench.backends.python.pb_control import is_model_ready, load_model, unload_model
from workbench.backends.python.pb_log import Logger, LogLevel
from workbench.backends.python.pb_metrics import MetricFamily
from workbench.backends.python.pb_tensor import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    TritonError,
    TritonModelException,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

#: request flags (``TRITONSERVER_RequestFlag``)
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
#: response flag: no more responses for this request (``TRITONSERVER_ResponseCompleteFlag``)
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
#: request release flags (``TRITONSERVER_RequestReleaseFlag``); RESCHEDULE is not supported
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
#: memory types (``TRITONSERVER_MemoryType``); only CPU memory is used here
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class PreferredMemory:
    """Where a BLS call would like its outputs (Triton's ``pb_utils.PreferredMemory``, passed
    as ``InferenceRequest(preferred_memory=...)``). Accepted and kept; outputs are always in
    CPU memory here (no GPU).

    Args:
        preferred_memory_type: ``TRITONSERVER_MEMORY_CPU`` or ``TRITONSERVER_MEMORY_GPU``.
        preferred_device_id: the device (0 = the first).

    Raises:
        TypeError: an argument is not an int (None included), as Triton's binding.
    """

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        for name, value in (("preferred_memory_type", preferred_memory_type),
                            ("preferred_device_id", preferred_device_id)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"PreferredMemory(): {name} must be an int, got {type(value).__name__}")
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id



# ---------------------------------------------------------------------------- responses
class InferenceResponse:
    """The response to one request (Triton's ``pb_utils.InferenceResponse``).

    Args:
        output_tensors: list of :class:`Tensor`; only the requested outputs reach the client.
        error: a :class:`TritonError` to fail the request with (outputs are then ignored).
        parameters: response parameters, a dict of ``str`` keys and ``bool`` / ``int`` /
            ``str`` values (or None).

    Raises:
        TypeError: ``output_tensors`` is not a list (None too) or holds something other
            than a Tensor; ``error`` is not a TritonError (pybind11's conversion errors).
        TritonModelException: ``output_tensors`` holds None ("Output tensor for inference
            response should not be empty."), or bad ``parameters`` (Triton's texts).
    """

    def __init__(self, output_tensors: Any = (), error: TritonError | None = None,
                 parameters: dict | None = None) -> None:
        tensors = check_list("__init__", "output_tensors", output_tensors)
        for tensor in tensors:
            if tensor is None:
                raise TritonModelException("Output tensor for inference response should not be empty.")
            if not isinstance(tensor, Tensor):
                raise incompatible("__init__", "output_tensors", "a list of pb_utils.Tensor", tensor)
        if error is not None and not isinstance(error, TritonError):
            raise incompatible("__init__", "error", "a pb_utils.TritonError", error)
        self._tensors = tensors
        self._error = error
        self._parameters = parameters_json(parameters)

    @classmethod
    def _wrap(cls, tensors: list[Tensor], error: TritonError | None = None,
              parameters: str | None = None) -> InferenceResponse:
        """A response decoded by the stub (parameters already JSON), without the checks."""
        response = cls.__new__(cls)
        response._tensors, response._error = tensors, error
        response._parameters = parameters or "{}"
        return response

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string (``"{}"`` when none)."""
        return self._parameters


class InferenceResponseSender:
    """Sends the responses of one request (``request.get_response_sender()``).

    Usable from any thread, during or after ``execute``, until a send carries
    :data:`TRITONSERVER_RESPONSE_COMPLETE_FINAL`. A decoupled model sends 0..n responses;
    a non-decoupled one exactly one (then, or with it, the FINAL flag), in place of
    returning it from ``execute`` (Triton's python_backend ``ResponseSender`` rules).
    """

    def __init__(self, key: int, decoupled: bool = True) -> None:
        self._key = key
        self._decoupled = decoupled
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response`` (may be None with the FINAL flag: close without a response).

        Raises:
            TritonModelException: the sender is closed, the response is missing without the
                FINAL flag, a non-decoupled model sends a second response or the FINAL flag
                before any response (Triton's texts), or the server is gone.
        """
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("send() expects a pb_utils.InferenceResponse")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        self._count(response is not None, final)
        pb_runtime.require().send_response(self._key, response, final)

    def _count(self, has_response: bool, final: bool) -> None:
        """Check one send against the rules and record it (Triton's ``UpdateStateAndCounters``).

        Raises:
            TritonModelException: the send is not allowed (Triton's texts).
        """
        with self._lock:
            if not self._decoupled:
                if has_response and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one "
                        "response."
                    )
                if not has_response and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final "
                        "before sending a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if final:
                self._closed = True
            self._sent += 1

    def _close(self) -> bool:
        """No more sends (the request failed): later sends raise "has been closed".
        Returns whether the sender was still open."""
        with self._lock:
            was_open, self._closed = not self._closed, True
            return was_open

    def close(self) -> None:
        """Older API: the same as ``send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)``."""
        self.send(None, TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        """Whether the request was cancelled: its client closed its stream or connection, or
        a BLS caller cancelled it (Triton's ``ResponseSender.is_cancelled``)."""
        return pb_runtime.runtime is not None and pb_runtime.runtime.is_cancelled(self._key)


# ---------------------------------------------------------------------------- requests
class InferenceRequest:
    """A request: what ``execute`` receives, and what a model builds for BLS.

    As a BLS request (Triton's business logic scripting) it runs ``model_name`` in the
    same server, through its scheduler (batching and statistics apply).

    Args:
        model_name: the model to run.
        requested_output_names: outputs to return (all outputs when empty).
        inputs: list of :class:`Tensor` (batch dimension included for batching models).
        request_id: request id echoed in responses.
        correlation_id: sequence id (int or str) for sequence models; 0 = none.
        model_version: version number; -1 = the latest ready one.
        flags: ``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`` / ``_END`` bits.
        timeout: queue timeout in microseconds (0 = none; applies where the model's queue
            policy allows overrides).
        parameters: request parameters, a dict of ``str`` keys and ``bool`` / ``int`` /
            ``str`` values (or None).
        preferred_memory, trace: accepted for compatibility; ignored (CPU only, no tracing).

    ``model_name``, ``requested_output_names`` and ``inputs`` are required, the others are
    keyword-only, as in Triton's binding (``pb_stub.cc``; a missing one raises TypeError).

    Raises:
        TypeError: a required argument missing (NVIDIA's bls ``test_bls_incorrect_args``), or
            an argument of the wrong type, None included (``inputs=None``,
            ``model_name=None``, ``requested_output_names=[None]``, ``flags=None``, ...;
            pybind11's conversion errors in Triton).
        TritonModelException: ``inputs`` holds None ("Input tensor for request with id
            '<id>' and model name '<model>' should not be empty."), an empty requested
            output name, or bad ``parameters`` (Triton's texts).
    """

    def __init__(self, model_name: str, requested_output_names: Any, inputs: Any, *,
                 request_id: str = "", correlation_id: int | str = 0, model_version: int = -1,
                 flags: int = 0, timeout: int = 0, preferred_memory: Any = None, trace: Any = None,
                 parameters: dict | None = None) -> None:
        init = "__init__"
        self._model_name = check_str(init, "model_name", model_name)
        self._request_id = check_str(init, "request_id", request_id)
        self._outputs = [check_str(init, "requested_output_names", n)
                         for n in check_list(init, "requested_output_names", requested_output_names)]
        self._inputs = check_list(init, "inputs", inputs)
        for tensor in self._inputs:
            if tensor is None:
                raise TritonModelException(
                    f"Input tensor for request with id '{self._request_id}' and model name "
                    f"'{self._model_name}' should not be empty."
                )
            if not isinstance(tensor, Tensor):
                raise incompatible(init, "inputs", "a list of pb_utils.Tensor", tensor)
        for name in self._outputs:
            if not name:
                raise TritonModelException(
                    f"Requested output name for request with id '{self._request_id}' and model "
                    f"name '{self._model_name}' should not be empty."
                )
        if correlation_id is None:
            raise incompatible(init, "correlation_id", "int or str", correlation_id)
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._correlation_id = correlation_id
        self._model_version = check_int(init, "model_version", model_version)
        self._flags = check_int(init, "flags", flags)
        self._timeout = check_int(init, "timeout", timeout)
        self._parameters = parameters_json(parameters)
        self._sender_key: int | None = None
        self._decoupled = True
        self._sender: InferenceResponseSender | None = None
        #: ``execute`` returned this request's one response before its sender was asked for
        self._answered = False
        #: how the request is released after ``execute`` (``set_release_flags``)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        # (keep _received below in step: it sets the same attributes; a test checks it)

    @classmethod
    def _received(cls, model_name: str, outputs: list[str], inputs: list[Tensor], request_id: str,
                  correlation_id: int | str, flags: int, timeout: int, parameters: str,
                  sender_key: int, decoupled: bool) -> InferenceRequest:
        """A request the stub decoded from the server's execute message (its values are
        checked there already): the constructor's attributes without its checks."""
        request = cls.__new__(cls)
        request._model_name, request._request_id, request._outputs = model_name, request_id, outputs
        request._inputs, request._correlation_id, request._model_version = inputs, correlation_id, -1
        request._flags, request._timeout, request._parameters = flags, timeout, parameters
        request._sender_key, request._decoupled, request._sender = sender_key, decoupled, None
        request._answered = False
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def _answer_returned(self) -> None:
        """``execute`` returned this request's response: its sender counts it as the one final
        response (a later send raises, as Triton's); the sender is made only if asked for.

        Raises:
            TritonModelException: its sender already sent a response (Triton's text).
        """
        if self._sender is not None:
            self._sender._count(True, True)
        else:
            self._answered = True

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        """Timeout in microseconds (0 = none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request's custom parameters as a JSON string (Triton's form)."""
        return self._parameters

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def trace(self) -> None:
        return None

    def set_release_flags(self, flags: int) -> None:
        """How the server releases this request once ``execute`` returns (Triton's
        ``TRITONBACKEND_RequestRelease`` flags): ``TRITONSERVER_REQUEST_RELEASE_ALL`` (the
        default) ends it; ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` alone sends it back to
        its model's scheduler to run again (a non-decoupled model then returns None for it).
        Only a model with ``sequence_batching { iterative_sequence: true }`` accepts a
        rescheduled request; elsewhere the request fails with Triton's text ("Request is
        released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not
        configured to handle such a flag."). No effect on a request the model built (BLS).

        Raises:
            TypeError: ``flags`` is not an int (pybind11's conversion error in Triton).
        """
        self._release_flags = check_int("set_release_flags", "flags", flags)

    def is_cancelled(self) -> bool:
        """Whether the request was cancelled: its client closed its stream or connection, or
        a BLS caller cancelled it (Triton's ``InferenceRequest.is_cancelled``). False for a
        request the model built itself."""
        runtime = pb_runtime.runtime
        return self._sender_key is not None and runtime is not None and runtime.is_cancelled(self._sender_key)

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender for this request's responses (one per request, the same on every call).

        A decoupled model sends 0..n responses with it; a non-decoupled one may send its one
        response with it instead of returning it from ``execute`` (as in Triton).

        Raises:
            TritonModelException: a request the model built itself (BLS) has no sender.
        """
        if self._sender_key is None:
            raise TritonModelException(  # Triton's text for a request the model built itself
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        if self._sender is None:
            self._sender = InferenceResponseSender(self._sender_key, self._decoupled)
            if self._answered:
                self._sender._count(True, True)
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` and wait (BLS).

        Returns:
            An :class:`InferenceResponse` (errors such as an unknown model come back as
            ``response.error()``), or with ``decoupled=True`` an iterator over every response
            (the last may be empty, carrying only the final flag).

        Raises:
            TritonModelException: called outside a model's stub.
        """
        call = pb_runtime.require().start_bls(self, decoupled)
        return call.iterator() if decoupled else call.wait()

    async def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` for ``async def execute``: several calls can be awaited together.

        Returns:
            As :meth:`exec`. With ``decoupled=True`` the iterator is returned once the first
            response has arrived (awaited without blocking the event loop, as Triton's
            ``async_exec`` does), so a model that iterates it right away does not hold up
            the other coroutines while the called model works.
        """
        call = pb_runtime.require().start_bls(self, decoupled)
        first = await call.wait_async()
        return call.iterator(first) if decoupled else first[0]


class ResponseIterator(Iterator):
    """Responses of a decoupled BLS call, in arrival order; ends after the final one.

    As Triton's ``ResponseIterator`` (python_backend ``pb_response_iterator.cc``), every
    response is kept: once the final one was read, iterating again (``iter()``, a ``for``
    loop) starts from the first response when the last pass reached the end, else resumes
    where it stopped; ``next()`` past the end raises StopIteration.
    """

    def __init__(self, next_response: Any, cancel: Any = None) -> None:
        self._next = next_response
        self._cancel = cancel
        self._done = False
        self._responses: list[InferenceResponse] = []
        self._index = 0  # the next kept response to hand out, once done

    def __iter__(self) -> ResponseIterator:
        if self._done and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            if self._index >= len(self._responses):
                raise StopIteration
            self._index += 1
            return self._responses[self._index - 1]
        response, final = self._next()
        if response is not None:
            self._responses.append(response)
        if final:
            self._done = True
            self._index = len(self._responses)
            if response is None:
                raise StopIteration
        return response

    def cancel(self) -> None:
        """Cancel the BLS request (Triton's ``ResponseIterator.cancel``): the called model sees
        ``is_cancelled()``; iterating goes on until its final response (often a CANCELLED
        error response). Nothing once the final response was read."""
        if not self._done and self._cancel is not None:
            self._cancel()


# ---------------------------------------------------------------------------- helpers
def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict, name: str) -> dict | None:
    """The ``input`` entry called ``name`` of a parsed model config, or None."""
    return next((i for i in model_config.get("input", ()) if i.get("name") == name), None)


def get_output_config_by_name(model_config: dict, name: str) -> dict | None:
    """The ``output`` entry called ``name`` of a parsed model config, or None."""
    return next((o for o in model_config.get("output", ()) if o.get("name") == name), None)


def get_model_dir() -> str:
    """The model's version folder (``<repository>/<model>/<version>``), where a model, or a
    Python-based backend's ``model.py`` serving it, reads the model's files (Triton's stub
    defines it for ``initialize`` and ``execute``). "" outside a stub process."""
    return pb_runtime.model_dir


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    """Whether the parsed model config sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "LogLevel",
    "Logger",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]
