"""Stub side of BLS calls and of response encoding (runs inside the stub process).

A BLS call (``pb_utils.InferenceRequest(...).exec()``) is a ``bls`` message to the server
with a call id; the server answers with ``bls_response`` messages for that id (one for
``exec``, 0..n then a final one for ``exec(decoupled=True)``), which the stub's reader
thread hands to the waiting :class:`BlsCall`. Any number of calls may be in flight, from
any thread or from ``asyncio.gather``.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
from typing import Any

from workbench.backends.python import pb_utils
from workbench.backends.python.pb_tensor import tensor_data
from workbench.backends.python.transport import (
    Blob,
    SegmentPool,
    SegmentReader,
    SharedMemoryFull,
    decode_tensor,
    encode_tensors,
)


def encode_response(response: pb_utils.InferenceResponse, pool: SegmentPool,
                    wanted: set[str] | frozenset[str], blob: Blob | None = None) -> dict:
    """A response as a message part; only the ``wanted`` outputs (all when empty) travel
    (small ones into ``blob`` when given: a call link reply)."""
    error = response.error()
    if error is not None:
        return {"outputs": [], "error": (error.message(), error.code()), "parameters": None}
    outputs = encode_tensors(((t.name(), tensor_data(t)) for t in response.output_tensors()
                              if not wanted or t.name() in wanted), pool, blob)
    parameters = response.parameters()
    return {"outputs": outputs, "error": None, "parameters": None if parameters == "{}" else parameters}


def encode_responses(responses: list, requests: list, pool: SegmentPool,
                     blob: Blob | None = None) -> list[dict | None]:
    """:func:`encode_response` for each response (None stays None), each with its request's
    requested outputs; when one fails (``SharedMemoryFull``), the segments of those encoded
    before it go back to ``pool`` and the error is raised."""
    encoded: list[dict | None] = []
    wanted: dict[tuple, frozenset[str]] = {}
    try:
        for response, request in zip(responses, requests, strict=True):
            if response is None:
                encoded.append(None)
                continue
            names = tuple(request.requested_output_names())
            if names not in wanted:
                wanted[names] = frozenset(names)
            encoded.append(encode_response(response, pool, wanted[names], blob))
    except BaseException:
        pool.release([wire[3][0] for part in encoded if part is not None
                      for wire in part["outputs"] if isinstance(wire[3], tuple)])
        raise
    return encoded


def decode_response(wire: dict | None, reader: SegmentReader) -> pb_utils.InferenceResponse | None:
    """A ``bls_response`` part -> ``pb_utils.InferenceResponse`` (None stays None)."""
    if wire is None:
        return None
    if wire["error"] is not None:
        message, code = wire["error"]
        return pb_utils.InferenceResponse._wrap([], pb_utils.TritonError(message, code))
    tensors = [pb_utils.Tensor._wrap(*decode_tensor(t, reader)) for t in wire["outputs"]]
    return pb_utils.InferenceResponse._wrap(tensors, parameters=wire["parameters"])


class BlsCall:
    """The responses of one BLS request, as they arrive: ``(response, final)`` pairs."""

    def __init__(self, cancel: Any = None) -> None:
        self._cancel = cancel  # cancels the call on the server (``ResponseIterator.cancel``)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiter: Any = None  # (loop, future) of an awaiting async_exec

    def deliver(self, response: pb_utils.InferenceResponse | None, final: bool) -> None:
        """Reader thread: one response arrived."""
        with self._lock:
            waiter, self._waiter = self._waiter, None
            if waiter is None:
                self._queue.put((response, final))
                return
        loop, future = waiter
        loop.call_soon_threadsafe(_resolve, future, (response, final))

    def wait(self) -> pb_utils.InferenceResponse:
        """Block until the (single) response of a non-decoupled call arrives."""
        response, _ = self._queue.get()
        return response

    async def wait_async(self) -> tuple[pb_utils.InferenceResponse | None, bool]:
        """Await the next ``(response, final)`` pair without blocking the event loop."""
        import asyncio

        loop = asyncio.get_running_loop()
        with self._lock:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                future = loop.create_future()
                self._waiter = (loop, future)
        return await future

    def iterator(self, first: tuple[pb_utils.InferenceResponse | None, bool] | None = None,
                 ) -> pb_utils.ResponseIterator:
        """Every response of a decoupled call, blocking for each; ``first``: the first
        ``(response, final)`` pair when it was already awaited (``async_exec``)."""
        pending = [] if first is None else [first]

        def next_response() -> tuple[pb_utils.InferenceResponse | None, bool]:
            return pending.pop() if pending else self._queue.get()

        return pb_utils.ResponseIterator(next_response, self._cancel)


def _resolve(future: Any, response: Any) -> None:
    if not future.done():
        future.set_result(response)


class BlsCalls:
    """The stub's BLS calls in flight, by call id.

    Args:
        stub: the :class:`~.stub.Stub` (sends messages, decodes server segments).
    """

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self._ids = itertools.count(1)
        self._calls: dict[int, BlsCall] = {}

    def start(self, request: pb_utils.InferenceRequest, decoupled: bool) -> BlsCall:
        """Send ``request`` to the server; the returned call collects its responses. An
        input that cannot be placed in shared memory (/dev/shm full) sends nothing: the call
        answers at once with one final error response, Triton's "Failed to increase the
        shared memory pool size ..." (python_backend's ``InferRequest::Exec``).

        Raises:
            TritonModelException: called outside ``execute`` (in ``initialize`` or
                ``finalize``: Triton's "BLS is only supported during the 'execute'
                function."), or the request has no model name.
        """
        if not self._stub.bls_allowed:
            raise pb_utils.TritonModelException("BLS is only supported during the 'execute' function.")
        if not request.model_name():
            raise pb_utils.TritonModelException("BLS request needs a model_name")
        tensors = []
        for tensor in request.inputs():
            if not isinstance(tensor, pb_utils.Tensor):
                raise pb_utils.TritonModelException("BLS request inputs must be pb_utils.Tensor objects")
            tensors.append((tensor.name(), tensor_data(tensor)))
        try:
            inputs = encode_tensors(tensors, self._stub.pool)
        except SharedMemoryFull as exc:
            # Triton's InferRequest::Exec: a shared-memory failure while saving the request
            # becomes the call's (one, final) error response; exec() does not raise
            return self.failed(exc.message)
        call_id = next(self._ids)
        call = BlsCall(lambda: self._cancel(call_id))
        self._calls[call_id] = call
        self._stub.send({"op": "bls", "call": call_id, "decoupled": bool(decoupled), "request": {
            "model": request.model_name(), "version": request.model_version(),
            "outputs": list(request.requested_output_names()), "inputs": inputs,
            "id": request.request_id(), "correlation_id": request.correlation_id(),
            "flags": request.flags(), "timeout": request.timeout(),
            "parameters": json.loads(request.parameters()),
        }})
        return call

    def _cancel(self, call_id: int) -> None:
        if call_id in self._calls:  # not ended yet
            self._stub.send({"op": "bls_cancel", "call": call_id})

    @staticmethod
    def failed(text: str) -> BlsCall:
        """A call that answers at once with one final error response carrying ``text``."""
        call = BlsCall()
        call.deliver(pb_utils.InferenceResponse(error=pb_utils.TritonError(text)), True)
        return call

    def deliver(self, message: dict) -> None:
        """Reader thread: a ``bls_response`` message."""
        final = message["final"]
        call = self._calls.pop(message["call"], None) if final else self._calls.get(message["call"])
        try:
            response = self._stub.decode_response(message["response"])
        except Exception as exc:  # noqa: BLE001 - e.g. a segment gone: the call fails, not the stub
            error = pb_utils.TritonError(f"unable to read the BLS response: {type(exc).__name__}: {exc}")
            response = pb_utils.InferenceResponse(error=error)
        if call is not None:
            call.deliver(response, final)


class Questions:
    """Calls the stub makes to the server that wait for one answer (custom metrics): a
    message with a call id, answered by an ``answer`` message for that id, which the stub's
    reader thread hands to the waiting thread. Any number may be in flight, from any thread
    but the reader's.

    Args:
        stub: the :class:`~.stub.Stub` (sends messages).
    """

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self._ids = itertools.count(1)
        self._waiting: dict[int, queue.SimpleQueue] = {}

    def ask(self, message: dict) -> Any:
        """Send ``message`` (its ``op`` set) and wait for the answer's value.

        Raises:
            TritonModelException: the server answered with an error (its text).
        """
        call_id = next(self._ids)
        answer: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting[call_id] = answer
        try:
            self._stub.send({**message, "call": call_id})
            value, error = answer.get()
        finally:
            self._waiting.pop(call_id, None)
        if error is not None:
            raise pb_utils.TritonModelException(error)
        return value

    def deliver(self, message: dict) -> None:
        """Reader thread: an ``answer`` message."""
        waiting = self._waiting.get(message["call"])
        if waiting is not None:
            waiting.put((message["value"], message["error"]))
