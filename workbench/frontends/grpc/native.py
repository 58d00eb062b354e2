"""The native gRPC front end (``--grpc-frontend=native``): HTTP/2 and ModelInfer's protobuf off the loop.

``native/grpc_frontend.cc`` (built by ``make setup`` into ``_native_grpc``, see ``native/build.py``)
serves the port on C++ threads with grpc++: it reads every call's request, parses a
``ModelInfer`` request there, and queues the calls; the first call into an empty queue writes an
eventfd that this module watches on the engine's loop, so one wake-up takes every call that
arrived meanwhile (:meth:`NativeGrpcServer._take`). Then:

* a plain ``ModelInfer`` (every input in ``raw_input_contents``, no parameters, no typed contents;
  no header forwarding, no tracing, gate open) becomes an :class:`~workbench.InferenceRequest`
  whose inputs are numpy views of the parsed request's bytes, goes to ``Server.infer``, and its
  outputs are written into the response by C++ (``finish_infer``: the bytes protobuf writes);
* every other call, ``ModelInfer`` included where it is not plain, goes to the same servicer
  methods grpc.aio calls (:class:`~workbench.frontends.grpc.service.GRPCInferenceService`, health,
  rollouts, through :func:`~workbench.frontends.grpc.decoding.add_lenient`'s handlers) with a
  :class:`NativeContext`, its request bytes deserialized by protobuf in Python, its response
  serialized there; so statuses and texts are the Python front end's.

Streaming calls (``ModelStreamInfer``, health ``Watch``) run the servicers' stream methods too: C++
reads every request message and hands each on as an event of the same queue, and writes one
response at a time, the next once Python took the previous one's completion (as grpc.aio resumes
a stream handler once its response is written, which ``--grpc-max-stream-unsent-size`` counts on).

Not served natively (documented in docs/grpc-native.md): ``--grpc-restricted-protocol``
(the server falls back to the Python front end), ``--grpc-max-connections`` (Debian's grpc++ 1.51
has no ``grpc.max_allowed_incoming_connections``: no connection cap). Compressed requests are
inflated in Python as on the Python front end (grpc-core's decompression is off on both).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from workbench import (
    InferenceRequest,
    InvalidArgument,
    RequestedOutput,
    Server,
    ServerOptions,
    tensor_from_buffer,
    tensor_to_buffer,
)
from workbench.frontends.error_boundary import grpc_failure
from workbench.frontends.grpc.codec import encode_raw_response
from workbench.frontends.grpc.decompression import Undecodable
from workbench.frontends.grpc.parameters import SHARED_MEMORY_REGION
from workbench.frontends.grpc.raw_wire import serialize_infer_response
from workbench.frontends.grpc.shutdown_gate import SHUTTING_DOWN, ShutdownGate

log = logging.getLogger(__name__)

_native_grpc: Any
try:  # the extension module itself (importing it by name keeps the package out of the graph)
    _native_grpc = importlib.import_module("workbench.frontends.grpc._native_grpc")
except ImportError:  # not built (no compiler or headers): the Python front end serves
    _native_grpc = None

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
#: the streaming methods of the services served (C++ reads every message of these)
STREAM_METHODS = ("/inference.GRPCInferenceService/ModelStreamInfer", "/grpc.health.v1.Health/Watch")
#: C++'s events on a streaming call: a request message, the end of the requests, a response written
_MESSAGE, _END, _WRITTEN = 2, 3, 4
#: the status text of a streaming method not in STREAM_METHODS (none of the services served has one)
NO_STREAMS = "streaming method without a stream registration in the native gRPC front end"


def available() -> bool:
    """Whether the native extension is built and importable."""
    return _native_grpc is not None


class _Aborted(Exception):
    """Raised by :meth:`NativeContext.abort` (grpc.aio raises its ``AbortError``)."""


class NativeContext:
    """The servicer context of one native call: what the servicers use of
    ``grpc.aio.ServicerContext`` (abort, metadata, compression, done callbacks, peer)."""

    __slots__ = ("_call", "_done", "_frontend", "code", "compress", "details")

    def __init__(self, frontend: Any, call: int) -> None:
        self._frontend = frontend
        self._call = call
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.compress = False
        self._done: list[Callable[[Any], None]] = []

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        """End the call with ``code`` and ``details`` (the first abort wins, as in grpc.aio)."""
        if self.code is None:
            self.code, self.details = code, details
        raise _Aborted(details)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        """The client's metadata, ``(key, value)`` pairs (keys lower-case)."""
        return tuple(self._frontend.metadata(self._call))

    def peer(self) -> str:
        return str(self._frontend.peer(self._call))

    def set_compression(self, compression: grpc.Compression) -> None:
        self.compress = compression == grpc.Compression.Gzip

    async def send_initial_metadata(self, metadata: Any) -> None:
        """Nothing to do: the response carries the initial metadata."""

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._done.append(callback)

    def done(self) -> None:
        for callback in self._done:
            callback(self)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


class NativeGrpcServer:
    """The native front end over one engine, with grpc.aio's server surface that
    :mod:`workbench.serving.grpc_service` uses (``start``, ``stop``) and the one the handler
    registration uses (``add_generic_rpc_handlers``, ``add_registered_method_handlers``).

    Args:
        server: the engine.
        service: the servicer of ``inference.GRPCInferenceService`` (its settings: header
            forwarding, response compression, the shutdown gate).
        options: the server's options (address, port, channel arguments).

    Raises:
        RuntimeError: the address cannot be bound.
    """

    def __init__(self, server: Server, service: Any, options: ServerOptions,
                 channel_args: list[tuple[str, int]]) -> None:
        assert _native_grpc is not None
        self.server = server
        self.service = service
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        self.shutdown_gate: ShutdownGate = service.shutdown_gate
        self._tasks: dict[int, asyncio.Task] = {}
        self._streams: dict[int, _Stream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        address = options.grpc_address
        host = f"[{address}]" if ":" in address else address
        args = list(channel_args)
        self._native = _native_grpc.Frontend(
            f"{host}:{options.grpc_port}", args, options.grpc_max_message_size,
            options.grpc_max_message_size, options.grpc_native_threads, list(STREAM_METHODS))
        self.port: int = self._native.port

    # ------------------------------------------------------------ registration (add_lenient)
    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        """Ignored: :meth:`add_registered_method_handlers` gets the same handlers."""

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        for name, handler in handlers.items():
            self.handlers[f"/{service}/{name}"] = handler

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Serve: watch the eventfd on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._native.fd, self._take)

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting; calls still open after ``grace`` seconds are cancelled."""
        self.shutdown_gate.closed = True
        if self._loop is not None:
            self._loop.remove_reader(self._native.fd)
        await asyncio.to_thread(self._native.stop, grace or 0.0)
        for task in list(self._tasks.values()):
            task.cancel()

    # ------------------------------------------------------------ dispatch
    def _take(self) -> None:
        """Every call that arrived since the last wake-up (one GIL acquisition for all)."""
        loop = self._loop
        assert loop is not None
        fast = self.service.forward is None and not self.server.tracer.enabled
        for call, method, payload, infer in self._native.take():
            if method is None:  # the client cancelled, or its deadline passed
                task = self._tasks.get(call)
                if task is not None:
                    task.cancel()
                continue
            if not method:  # an event of a streaming call
                stream = self._streams.get(call)
                if stream is not None:
                    stream.event(infer, payload)
                continue
            if method in STREAM_METHODS:
                stream = self._streams[call] = _Stream(loop)
                coroutine = self._stream(call, method, stream)
            elif infer is not None and fast and not self.shutdown_gate.closed:
                coroutine = self._infer(call, infer)
            else:
                if payload is None:
                    payload = self._native.payload(call)
                coroutine = self._generic(call, method, payload)
            task = loop.create_task(coroutine)
            self._tasks[call] = task
            task.add_done_callback(functools.partial(self._forget, call))

    def _forget(self, call: int, task: asyncio.Task) -> None:
        """The call's task ended; one cancelled before it ran never answered: CANCELLED (a call
        already answered is not answered twice)."""
        self._tasks.pop(call, None)
        self._streams.pop(call, None)
        if task.cancelled():
            self._native.finish_error(call, grpc.StatusCode.CANCELLED.value[0], "CANCELLED")

    async def _infer(self, call: int, infer: tuple) -> None:
        """A plain ModelInfer: decoded by C++, answered by C++ (the Python path's wire bytes)."""
        native = self._native
        model, version, request_id, inputs, outputs = infer
        try:
            tensors = [tensor_from_buffer(name, datatype, shape, memoryview(raw), model=model,
                                          request_id=request_id)
                       for name, datatype, shape, raw in inputs]
            if version:
                int(version)
        except (InvalidArgument, ValueError):  # Python's path has the texts (and checks all inputs)
            await self._generic(call, MODEL_INFER, native.payload(call))
            return
        request = InferenceRequest(
            model_name=model, model_version=version, inputs=tensors,
            outputs=[RequestedOutput(name, {}) for name in outputs] if outputs else None,
            id=request_id, parameters={})
        compress = self.service.compression is not None
        self.shutdown_gate.calls += 1  # in flight (the gRPC service's stop counts them)
        try:
            response = await self.server.infer(request)
        except asyncio.CancelledError:
            native.finish_error(call, grpc.StatusCode.CANCELLED.value[0], "CANCELLED")
            raise
        except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
            code, message = grpc_failure(exc, "ModelInfer")
            native.finish_error(call, code.value[0], message)
            return
        finally:
            self.shutdown_gate.calls -= 1
        if response.parameters or any(t.parameters for t in response.outputs):
            native.finish_bytes(call, serialize_infer_response(encode_raw_response(response)), compress)
            return
        native.finish_infer(call, response.model_name, response.model_version, response.id,
                            [(t.name, t.datatype, t.data.shape, _buffer(t)) for t in response.outputs],
                            compress)

    async def _stream(self, call: int, method: str, stream: _Stream) -> None:
        """A streaming call through the servicer method grpc.aio runs: request messages as they
        come, each response written (and its write awaited, as grpc.aio's generator) in turn."""
        native = self._native
        handler = self.handlers.get(method)
        if handler is None:
            native.finish_error(call, grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!")
            return
        context = NativeContext(native, call)
        deserialize, serialize = handler.request_deserializer, handler.response_serializer

        async def requests() -> AsyncIterator[Any]:
            while (message := await stream.next_message()) is not None:
                yield deserialize(message)

        with _ServicerCall(native, call, method, context) as outcome:
            if self.shutdown_gate.closed:
                native.finish_error(call, grpc.StatusCode.CANCELLED.value[0], SHUTTING_DOWN)
                return
            if handler.stream_stream is not None:
                responses = handler.stream_stream(requests(), context)
            else:
                first = await stream.next_message()
                if first is None:
                    native.finish_error(call, grpc.StatusCode.INTERNAL.value[0], "no request message")
                    return
                responses = handler.unary_stream(deserialize(first), context)
            async for response in responses:
                native.stream_write(call, serialize(response), context.compress)
                await stream.written()
        if outcome.failed:
            return
        native.finish_error(call, grpc.StatusCode.OK.value[0], "")

    async def _generic(self, call: int, method: str, payload: bytes) -> None:
        """Any call through the servicer methods grpc.aio runs (request parsed by protobuf)."""
        native = self._native
        handler = self.handlers.get(method)
        if handler is None:
            native.finish_error(call, grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!")
            return
        if handler.unary_unary is None:
            native.finish_error(call, grpc.StatusCode.UNIMPLEMENTED.value[0], NO_STREAMS)
            return
        context = NativeContext(native, call)
        with _ServicerCall(native, call, method, context) as outcome:
            if self.shutdown_gate.closed:
                native.finish_error(call, grpc.StatusCode.CANCELLED.value[0], SHUTTING_DOWN)
                return
            request = handler.request_deserializer(payload)
            if isinstance(request, Undecodable):
                native.finish_error(call, request.code.value[0], request.message)
                return
            response = await handler.unary_unary(request, context)
            data = handler.response_serializer(response)
        if outcome.failed:
            return
        native.finish_bytes(call, data, context.compress)


class _ServicerCall:
    """Ends a servicer method's call that raised, as grpc.aio does: its own ``abort`` with
    that status, a cancellation as CANCELLED (re-raised), anything else as UNKNOWN
    ``Unexpected error: ...`` (logged); :attr:`failed` tells the caller the call is ended."""

    __slots__ = ("_call", "_context", "_method", "_native", "failed")

    def __init__(self, native: Any, call: int, method: str, context: NativeContext) -> None:
        self._native, self._call, self._method, self._context = native, call, method, context
        self.failed = False

    def __enter__(self) -> _ServicerCall:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        self._context.done()
        if exc is None:
            return False
        if isinstance(exc, asyncio.CancelledError):
            self._native.finish_error(self._call, grpc.StatusCode.CANCELLED.value[0], "CANCELLED")
            return False
        if isinstance(exc, _Aborted):
            code = self._context.code or grpc.StatusCode.UNKNOWN
            self._native.finish_error(self._call, code.value[0], self._context.details)
        elif isinstance(exc, Exception):
            log.error("uncaught exception in %s (answered as grpc.aio would)", self._method, exc_info=exc)
            self._native.finish_error(self._call, grpc.StatusCode.UNKNOWN.value[0], f"Unexpected error: {exc}")
        else:
            return False
        self.failed = True
        return True


class _Stream:
    """The request messages and write completions of one streaming call, fed by
    :meth:`NativeGrpcServer._take`."""

    __slots__ = ("_loop", "_messages", "_written")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._messages: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._written: asyncio.Future[None] | None = None

    def event(self, kind: int, message: bytes | None) -> None:
        if kind == _MESSAGE:
            self._messages.put_nowait(message)
        elif kind == _END:
            self._messages.put_nowait(None)
        elif self._written is not None and not self._written.done():
            self._written.set_result(None)

    async def next_message(self) -> bytes | None:
        """The next request message; None once the client sent its last (and from then on)."""
        message = await self._messages.get()
        if message is None:
            self._messages.put_nowait(None)
        return message

    async def written(self) -> None:
        """Until C++ wrote the response handed to it last."""
        self._written = self._loop.create_future()
        await self._written


def _buffer(tensor: Any) -> Any:
    """The output's bytes (a view of its array), or b"" for an output in shared memory."""
    return b"" if SHARED_MEMORY_REGION in tensor.parameters else tensor_to_buffer(tensor)


__all__ = ["NativeContext", "NativeGrpcServer", "available"]
