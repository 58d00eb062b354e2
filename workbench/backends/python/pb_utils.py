"""``triton_python_backend_utils``: the module Triton Python models import as ``pb_utils``.

The stub installs this module as ``sys.modules["triton_python_backend_utils"]`` before it
imports ``model.py``, so unmodified Triton models run here. It follows the API of Triton's
python_backend (``src/resources/triton_python_backend_utils.py`` plus the C++-bound classes
``Tensor``, ``InferenceRequest``, ``InferenceResponse``, ``TritonError``, ``Logger``,
response senders and ``ModelConfig`` for ``auto_complete_config``); see TRITON_COMPAT §12.

Calls that leave the stub (BLS ``exec`` / ``async_exec``, ``ResponseSender.send``,
``Logger``) go through :data:`_runtime`, which the stub sets; outside a stub BLS and
senders raise :class:`TritonModelException` and the logger prints to stderr.

Not provided: custom metrics (``MetricFamily``), model control from a model
(``load_model`` / ``unload_model`` / ``is_model_ready``), GPU tensors, request
rescheduling (``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``).

This module runs inside the stub process: numpy and the standard library only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from workbench.backends.python.model_config import ModelConfig

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

#: the stub's bridge to the server (BLS, response senders, log lines); None outside a stub
_runtime: Any = None

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
#: ``inference.DataType`` numbers (TYPE_BOOL = 1 ... TYPE_STRING = 13) -> numpy types
_CODE_TO_NUMPY = {
    1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
    7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64,
    13: np.object_,
}
_NUMPY_TO_CODE = {np.dtype(t): code for code, t in _CODE_TO_NUMPY.items()}


# ---------------------------------------------------------------------------- errors
class TritonError:
    """An error carried by an :class:`InferenceResponse` (not raised; Triton's ``TritonError``).

    Args:
        message: the text the client receives.
        code: one of the class constants (Triton's ``TRITONSERVER_Error_Code``); the
            client sees the matching status (INVALID_ARG -> HTTP 400, ...).
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail (bad tensors, BLS misuse); models may raise it too."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self._message = str(message)

    def message(self) -> str:
        return self._message


# ---------------------------------------------------------------------------- tensors
class Tensor:
    """A named CPU tensor (Triton's ``pb_utils.Tensor``).

    Args:
        name: tensor name as in the model config.
        data: a numpy array (or anything ``np.asarray`` takes). BYTES tensors are numpy
            ``object`` arrays of ``bytes`` (``str`` elements are sent as UTF-8); numpy
            ``str_`` arrays are refused, as in Triton.

    Raises:
        TritonModelException: a numpy ``str_`` / ``void`` array, or a dtype with no Triton type.
    """

    def __init__(self, name: str, data: Any) -> None:
        array = data if isinstance(data, np.ndarray) else np.asarray(data)
        if array.dtype.kind in ("U", "V"):
            raise TritonModelException(
                "Tensor dtype used for numpy_array is not supported by Python backend. "
                "Please use np.object_ instead."
            )
        if array.dtype.kind == "S":
            array = array.astype(np.object_)
        if array.dtype not in _NUMPY_TO_CODE:
            raise TritonModelException(f"numpy dtype {array.dtype} of tensor '{name}' has no Triton type")
        self._name = name
        self._array = array

    @classmethod
    def _wrap(cls, name: str, array: np.ndarray) -> Tensor:
        """A tensor over a decoded array, without the constructor's checks (stub use)."""
        tensor = cls.__new__(cls)
        tensor._name, tensor._array = name, array
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array (no copy; BYTES -> object array of ``bytes``)."""
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        """The ``inference.DataType`` number (TYPE_FP32 = 11, TYPE_STRING = 13, ...)."""
        return _NUMPY_TO_CODE[self._array.dtype]

    def is_cpu(self) -> bool:
        """Always True: tensors live in CPU memory here."""
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the data (CPU; not for BYTES tensors)."""
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not support BYTES tensors")
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor over a DLPack capsule or an object with ``__dlpack__`` (torch, cupy...).

        Raises:
            TritonModelException: the data is not in CPU memory or cannot be read.
        """
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TritonModelException(f"unable to read DLPack tensor '{name}': {exc}") from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


class _Capsule:
    """Lets ``np.from_dlpack`` read a bare DLPack capsule (it wants ``__dlpack__``)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


# ---------------------------------------------------------------------------- responses
class InferenceResponse:
    """The response to one request (Triton's ``pb_utils.InferenceResponse``).

    Args:
        output_tensors: list of :class:`Tensor`; only the requested outputs reach the client.
        error: a :class:`TritonError` to fail the request with (outputs are then ignored).
        parameters: response parameters, a dict or its JSON string.

    Raises:
        TritonModelException: ``output_tensors`` is not a list of Tensor.
    """

    def __init__(self, output_tensors: Any = None, error: TritonError | None = None,
                 parameters: dict | str | None = None) -> None:
        tensors = [] if output_tensors is None else output_tensors
        if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, Tensor) for t in tensors):
            raise TritonModelException('"output_tensors" must be a list of pb_utils.Tensor.')
        self._tensors = list(tensors)
        self._error = error
        self._parameters = _parameters_json(parameters)

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
    """Sends the responses of one request of a decoupled model (``request.get_response_sender()``).

    Usable from any thread, during or after ``execute``, until a send carries
    :data:`TRITONSERVER_RESPONSE_COMPLETE_FINAL`.
    """

    def __init__(self, key: int) -> None:
        self._key = key
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response`` (may be None with the FINAL flag: close without a response).

        Raises:
            TritonModelException: the sender is closed, the response is missing without the
                FINAL flag, or the server is gone.
        """
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("send() expects a pb_utils.InferenceResponse")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if final:
            self._closed = True
        _require_runtime().send_response(self._key, response, final)

    def close(self) -> None:
        """Older API: the same as ``send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)``."""
        self.send(None, TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        """Whether the client cancelled the request (not reported by this server: False)."""
        return False


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
        parameters: request parameters, a dict or its JSON string.
        preferred_memory, trace: accepted for compatibility; ignored (CPU only, no tracing).
    """

    def __init__(self, model_name: str = "", requested_output_names: Any = (), inputs: Any = (),
                 request_id: str = "", correlation_id: int | str = 0, model_version: int = -1,
                 flags: int = 0, timeout: int = 0, preferred_memory: Any = None, trace: Any = None,
                 parameters: dict | str | None = None) -> None:
        self._model_name = model_name
        self._outputs = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_json(parameters)
        self._sender_key: int | None = None
        self._sender: InferenceResponseSender | None = None

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
        """Only ``TRITONSERVER_REQUEST_RELEASE_ALL`` is supported.

        Raises:
            TritonModelException: for RESCHEDULE (iterative sequences are not supported).
        """
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by this server")

    def is_cancelled(self) -> bool:
        """Whether the client cancelled the request (not reported by this server: False)."""
        return False

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender for this request's responses (decoupled models only).

        Raises:
            TritonModelException: the model is not decoupled.
        """
        if self._sender_key is None:
            raise TritonModelException(
                "Unable to get the response sender: the model does not use the decoupled "
                "transaction policy"
            )
        if self._sender is None:
            self._sender = InferenceResponseSender(self._sender_key)
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
        call = _require_runtime().start_bls(self, decoupled)
        return call.iterator() if decoupled else call.wait()

    async def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` for ``async def execute``: several calls can be awaited together.

        Returns:
            As :meth:`exec`; with ``decoupled=True`` the iterator is returned at once.
        """
        call = _require_runtime().start_bls(self, decoupled)
        if decoupled:
            return call.iterator()
        return await call.wait_async()


class ResponseIterator(Iterator):
    """Responses of a decoupled BLS call, in arrival order; ends after the final one."""

    def __init__(self, next_response: Any, cancel: Any = None) -> None:
        self._next = next_response
        self._cancel = cancel
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        response, final = self._next()
        if final:
            self._done = True
            if response is None:
                raise StopIteration
        return response

    def cancel(self) -> None:
        """Stop reading further responses (the called model is not interrupted)."""
        self._done = True


# ---------------------------------------------------------------------------- logging
class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Log lines into the server's log (Triton's ``pb_utils.Logger``), tagged with the model
    file and line that logged them."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        frame = sys._getframe(1)
        while frame.f_code.co_filename == __file__ and frame.f_back is not None:
            frame = frame.f_back
        where = (frame.f_code.co_filename, frame.f_lineno)
        if _runtime is None:
            print(f"[{_LEVEL_NAMES.get(level, 'INFO')}] {message}", file=sys.stderr)
            return
        _runtime.log(_LEVEL_NAMES.get(level, "INFO"), str(message), *where)

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, LogLevel.VERBOSE)


_LEVEL_NAMES = {LogLevel.INFO: "INFO", LogLevel.WARNING: "WARNING", LogLevel.ERROR: "ERROR",
                LogLevel.VERBOSE: "VERBOSE"}


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


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    """Whether the parsed model config sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (``TYPE_STRING`` -> ``np.object_``).

    Raises:
        KeyError: an unknown type name.
    """
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """``inference.DataType`` number -> numpy type (None when unknown)."""
    return _CODE_TO_NUMPY.get(int(data_type))


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> ``inference.DataType`` number (None when unknown)."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return 13
    return _NUMPY_TO_CODE.get(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """Triton's BYTES encoding (4-byte little-endian length + bytes per element, C order),
    as a 0-d numpy object array holding the encoded ``bytes`` (empty 1-D array for size 0)."""
    from workbench.backends.python.transport import serialize_bytes

    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    return np.asarray(serialize_bytes(np.asarray(input_tensor)), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """Triton's BYTES encoding -> 1-D numpy object array of ``bytes``."""
    from workbench.backends.python.transport import deserialize_bytes

    if isinstance(encoded_tensor, np.ndarray) and encoded_tensor.dtype == np.object_:
        encoded_tensor = encoded_tensor.item()
    return deserialize_bytes(encoded_tensor)


def _parameters_json(parameters: dict | str | None) -> str:
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        json.loads(parameters)  # raises on malformed JSON, as Triton does
        return parameters
    if not isinstance(parameters, dict):
        raise TritonModelException("parameters must be a dict or a JSON string")
    return json.dumps(parameters)


def _require_runtime() -> Any:
    if _runtime is None:
        raise TritonModelException("this call is only available inside a model's stub process")
    return _runtime


__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITON_STRING_TO_NUMPY",
    "TritonError",
    "TritonModelException",
    "Tensor",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "ResponseIterator",
    "Logger",
    "LogLevel",
    "ModelConfig",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
]
