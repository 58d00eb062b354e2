"""Server side of BLS: a model's ``pb_utils.InferenceRequest(...).exec()`` runs in this server.

Each ``bls`` message from a stub becomes a :class:`workbench.messages.types.InferenceRequest` that
runs through ``BackendContext.infer_stream`` on the engine's event loop (the same path as
a client request: validation, scheduling, batching, statistics). Responses go back as
``bls_response`` messages; engine errors (unknown model, bad input, a failed execution)
go back as responses carrying a ``TritonError`` with the engine's text and code, e.g.
``Model x - Error when running inference: Request for unknown model: 'x' is not found``
(NOT_FOUND), as Triton's BLS reports them (:func:`bls_error`).

Replies are encoded and sent by one worker thread per instance, so the event loop never
copies tensors into shared memory or blocks on the stub's socket.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import queue
import threading
from typing import Any

from workbench.backends.base import BackendContext
from workbench.backends.python.process import StubDied, StubProcess
from workbench.backends.python.transport import SharedMemoryFull, encode_tensors
from workbench.common.datatypes import wire_name
from workbench.common.errors import InternalError, InvalidArgument, StatusCode, WorkbenchError
from workbench.messages.types import CancelSignal, InferenceRequest, InferenceResponse, RequestedOutput, Tensor

log = logging.getLogger(__name__)

#: engine status codes -> ``pb_utils.TritonError`` codes (Triton's ``TRITONSERVER_Error_Code``)
TRITON_ERROR_CODES = {
    StatusCode.UNKNOWN: 0, StatusCode.INTERNAL: 1, StatusCode.NOT_FOUND: 2,
    StatusCode.INVALID_ARG: 3, StatusCode.UNAVAILABLE: 4, StatusCode.UNSUPPORTED: 5,
    StatusCode.ALREADY_EXISTS: 6, StatusCode.CANCELLED: 7,
}


class BlsForwarder:
    """Runs the BLS requests of one model instance's stubs.

    Args:
        context: the engine's loop and ``infer_stream``; None outside a server (every BLS
            call then fails with an error response).
        instance_name: for log lines.
    """

    def __init__(self, context: BackendContext | None, instance_name: str) -> None:
        self._context = context
        self._instance_name = instance_name
        self._replies: queue.SimpleQueue = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._running: set[concurrent.futures.Future] = set()
        self._signals: dict[tuple[StubProcess, int], CancelSignal] = {}  # calls running, by (stub, call id)
        self._lock = threading.Lock()

    def submit(self, message: dict, stub: StubProcess) -> None:
        """Start one BLS request (called on the stub's reader thread; never blocks)."""
        call_id = message["call"]
        if self._context is None:
            self._reply(stub, call_id, InternalError("BLS is only available inside a running server"), True)
            return
        try:
            request = engine_request(message["request"])
        except WorkbenchError as exc:
            self._reply(stub, call_id, exc, True)
            return
        request.cancel = self._signals[(stub, call_id)] = CancelSignal()
        run = self._run(stub, call_id, request, bool(message["decoupled"]))
        future = asyncio.run_coroutine_threadsafe(run, self._context.loop)
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._running.discard(future)

    async def _run(self, stub: StubProcess, call_id: int, request: InferenceRequest, decoupled: bool) -> None:
        assert self._context is not None
        try:
            if decoupled:
                final = False
                async with contextlib.aclosing(self._context.infer_stream(request)) as stream:
                    async for response in stream:
                        final = response.final
                        self._reply(stub, call_id, response, final)
                if not final:
                    self._reply(stub, call_id, None, True)
            else:
                self._reply(stub, call_id, await self._single(request), True)
        except WorkbenchError as exc:
            self._reply(stub, call_id, bls_error(exc, request.model_name), True)
        except Exception as exc:  # noqa: BLE001 - reported to the model, never raised into the loop
            self._reply(stub, call_id, InternalError(f"{type(exc).__name__}: {exc}"), True)
        finally:
            self._signals.pop((stub, call_id), None)

    def cancel(self, stub: StubProcess, call_id: int) -> None:
        """The model cancelled its call ``call_id`` (``ResponseIterator.cancel``): the request
        is cancelled in the engine (the called model sees ``is_cancelled()``) and its
        responses keep coming until the final one (Triton's BLS cancellation)."""
        signal = self._signals.get((stub, call_id))
        if signal is not None:
            signal.cancel()

    async def _single(self, request: InferenceRequest) -> InferenceResponse:
        assert self._context is not None
        async with contextlib.aclosing(self._context.infer_stream(request)) as stream:
            responses = [r async for r in stream]
        if len(responses) == 1:
            return responses[0]
        with_outputs = [r for r in responses if r.outputs]
        if len(with_outputs) != 1:
            raise InvalidArgument(
                f"model '{request.model_name}' sent {len(with_outputs)} responses; it uses the "
                "decoupled transaction policy: use exec(decoupled=True) to read its responses"
            )
        return with_outputs[0]

    # ------------------------------------------------------------------ replies
    def _reply(self, stub: StubProcess, call_id: int, payload: Any, final: bool) -> None:
        """Queue one reply; the worker thread encodes and sends it (any thread)."""
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._send_replies, daemon=True,
                                                name=f"{self._instance_name}-bls")
                self._worker.start()
        self._replies.put((stub, call_id, payload, final))

    def _send_replies(self) -> None:
        while (item := self._replies.get()) is not None:
            stub, call_id, payload, final = item
            try:
                response = _encode(payload, stub)
                stub.send({"op": "bls_response", "call": call_id, "response": response, "final": final})
            except StubDied:
                pass  # the model is gone; its segments went with it
            except Exception as exc:  # e.g. /dev/shm full: tell the model
                if not stub.alive:
                    continue
                if isinstance(exc, SharedMemoryFull):  # Triton's text
                    error = _encode(InternalError(str(exc)), stub)
                else:
                    log.exception("model instance '%s': cannot return a BLS response", self._instance_name)
                    error = _encode(InternalError("failed to return the BLS response (see server log)"), stub)
                with contextlib.suppress(StubDied):
                    stub.send({"op": "bls_response", "call": call_id, "response": error, "final": final})

    def close(self) -> None:
        """Cancel running BLS requests and stop the reply thread."""
        with self._lock:
            running, self._running = list(self._running), set()
            worker = self._worker
        for future in running:
            future.cancel()
        if worker is not None:
            self._replies.put(None)
            worker.join()


def bls_error(error: WorkbenchError, model_name: str) -> WorkbenchError:
    """The error a BLS call reports for ``error``: one the engine raised before any backend
    saw the request (``before_execution``: unknown model, not ready, bad input) reads
    "Model <name> - Error when running inference: <reason>", as Triton's python_backend
    words what ``TRITONSERVER_ServerInferAsync`` refused (``request_executor.cc``); a
    failed execution is reported with the model's own text. The status code is kept."""
    if not error.before_execution:
        return error
    wrapped = WorkbenchError(f"Model {model_name} - Error when running inference: {error.message}")
    wrapped.code = error.code
    return wrapped


def engine_request(wire: dict) -> InferenceRequest:
    """A stub's ``bls`` request (tensors already decoded) -> the engine's request.

    ``correlation_id`` becomes ``sequence_id``, the flags ``sequence_start`` /
    ``sequence_end``, a non-zero ``timeout`` (µs) the ``timeout`` parameter.

    Raises:
        InvalidArgument: an input whose numpy dtype has no Triton datatype.
    """
    inputs = [Tensor(name, wire_name(array), array) for name, array in wire["inputs"]]
    parameters = dict(wire["parameters"] or {})
    if wire["correlation_id"]:
        parameters["sequence_id"] = wire["correlation_id"]
    if wire["flags"] & 1:
        parameters["sequence_start"] = True
    if wire["flags"] & 2:
        parameters["sequence_end"] = True
    if wire["timeout"] > 0:
        parameters["timeout"] = wire["timeout"]
    version = "" if wire["version"] < 0 else str(wire["version"])
    outputs = [RequestedOutput(name) for name in wire["outputs"]] or None
    return InferenceRequest(wire["model"], inputs, version, outputs, wire["id"], parameters)


def _encode(payload: Any, stub: StubProcess) -> dict | None:
    if payload is None:
        return None
    if isinstance(payload, WorkbenchError):
        return {"outputs": [], "error": (payload.message, TRITON_ERROR_CODES[payload.code]), "parameters": None}
    outputs = encode_tensors(((t.name, t.data) for t in payload.outputs), stub.pool)
    parameters = json.dumps(payload.parameters, default=str) if payload.parameters else None
    return {"outputs": outputs, "error": None, "parameters": parameters}
