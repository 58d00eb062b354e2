"""``ModelStreamInfer``: many requests on one bidirectional stream, 0..n responses each.

Triton's ``ModelStreamInferHandler``: requests run concurrently; non-decoupled responses
leave in request order, decoupled ones as the model sends them; each carries
``triton_final_response``; an empty final response only with
``triton_enable_empty_final_response``; a failed request answers ``error_message``; closing
or cancelling the stream cancels the requests in flight. With ``triton_grpc_error: true`` in
the metadata the first request failing in the engine (here its input checks too) ends the
stream with its gRPC status, after the responses queued before it; requests failing before
the engine still answer in the stream.

Tracing (``--trace-config``): each request sampled on its own once its model is known;
``GRPC_WAITREAD_START`` / ``_END``, ``INFER_RESPONSE_COMPLETE``, ``GRPC_SEND_START`` /
``_END`` around each response written; written once the last response is.

A client that does not read (beyond Triton, whose response pool blocks the model):
responses wait serialized in the stream's outbox until grpc.aio takes each; over
``--grpc-max-stream-unsent-size`` bytes waiting (each counted as its size plus
:data:`RESPONSE_OVERHEAD`) the stream and its requests are cancelled, the waiting responses
dropped, and the client gets RESOURCE_EXHAUSTED :data:`UNREAD_TEXT`. User view: docs/api.md
(gRPC API), docs/metrics-tracing.md (Tracing), docs/security.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import TypeAlias

from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceResponse, Server, WorkbenchError
from workbench.frontends.error_boundary import failure
from workbench.frontends.grpc.codec import decode_request, encode_response
from workbench.tracing import RequestTrace

log = logging.getLogger(__name__)

_END = object()
_CANCELLED = object()

#: bytes each waiting response counts beyond its serialized size (the Python object holding it
#: and its queue slot), so many tiny responses are bounded too
RESPONSE_OVERHEAD = 128

#: the RESOURCE_EXHAUSTED text of a stream cancelled for responses not read (``{limit}`` bytes)
UNREAD_TEXT = ("ModelStreamInfer cancelled: more than {limit} bytes of responses were waiting for "
               "the client to read them (--grpc-max-stream-unsent-size)")


class StreamCancelled(Exception):
    """Raised by :meth:`StreamSession.run` once the stream was cancelled for responses the client
    did not read; the text is the status message to send (RESOURCE_EXHAUSTED)."""


class StreamFailed(Exception):
    """Raised by :meth:`StreamSession.run` in ``triton_grpc_error`` mode once a request failed:
    ``error`` is the engine's error, to send as the RPC's status."""

    def __init__(self, error: WorkbenchError) -> None:
        super().__init__(error.message)
        self.error = error


class _Traced:
    """An outbox entry of a traced request: ``message`` to write (None: nothing), then the
    trace's release when ``last``."""

    __slots__ = ("last", "message", "trace")

    def __init__(self, message: bytes | None, trace: RequestTrace, last: bool) -> None:
        self.message = message
        self.trace = trace
        self.last = last


#: what the outbox holds: a serialized ``ModelStreamInferResponse``, a traced one, _END or
#: _CANCELLED
_Out: TypeAlias = "bytes | _Traced"


class StreamSession:
    """The state of one ``ModelStreamInfer`` call: in-flight requests and their outbox."""

    def __init__(self, server: Server, forwarded: dict[str, str] | WorkbenchError | None = None,
                 carrier: Mapping[str, str] | None = None, max_unsent: int = 64 * 1024 * 1024,
                 grpc_error: bool = False) -> None:
        """``forwarded``: the stream's metadata forwarded as parameters of each request
        (``--grpc-header-forward-pattern``), or the error that fails each request;
        ``carrier``: the stream's metadata for the trace sampling (an OpenTelemetry
        ``traceparent``; None when no setting reads it); ``max_unsent``: the bytes of responses
        that may wait for the client (``--grpc-max-stream-unsent-size``, see the module
        docstring); ``grpc_error``: the client asked for ``triton_grpc_error`` (a failed request
        ends the stream with its error as the status)."""
        self.server = server
        self._forwarded = forwarded
        self._carrier = carrier
        self._max_unsent = max_unsent
        self._grpc_error = grpc_error
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._reader: asyncio.Task | None = None
        self._next_ordered = 0
        self._held: dict[int, _Out | None] = {}
        self._reading = True
        #: bytes and count of the responses not yet taken by grpc.aio (held, queued or being written)
        self._unsent = 0
        self._waiting = 0
        self.cancelled = False
        #: traces not released yet (released when the stream ends early)
        self._traces: set[RequestTrace] = set()

    async def run(self, request_iterator: AsyncIterator[pb.ModelInferRequest]):
        """Yield every ``ModelStreamInferResponse`` (serialized) until the client closes its
        side and every request has finished; a broken request stream ends the RPC with its
        error.

        Raises:
            StreamCancelled: too many response bytes waited for the client (module docstring).
            StreamFailed: a request failed in ``triton_grpc_error`` mode.
        """
        self._reader = reader = asyncio.create_task(self._read(request_iterator))
        try:
            while (item := await self._outbox.get()) is not _END:
                if item is _CANCELLED:
                    raise StreamCancelled(UNREAD_TEXT.format(limit=self._max_unsent))
                if isinstance(item, StreamFailed):
                    raise item
                if not isinstance(item, _Traced):
                    yield item  # grpc.aio resumes this generator once it is written
                    self._sent(item)
                    continue
                if item.message is not None:
                    item.trace.stamp("GRPC_SEND_START", time.monotonic_ns())
                    yield item.message
                    item.trace.stamp("GRPC_SEND_END", time.monotonic_ns())
                    self._sent(item.message)
                if item.last:
                    self._traces.discard(item.trace)
                    item.trace.release()
            await reader
        finally:
            self._stop()

    def _stop(self) -> None:
        """Cancel the reader and the requests in flight; release the traces left."""
        if self._reader is not None:
            self._reader.cancel()
        for task in self._tasks:
            task.cancel()
        for trace in self._traces:  # the stream ended before these requests did
            trace.release()
        self._traces.clear()

    # --- the unsent responses ---------------------------------------------------------------

    def _counted(self, message: bytes | None) -> bool:
        """Count a response now waiting; False (and the stream cancelled) when that makes more
        than ``max_unsent`` bytes wait beyond two responses."""
        if self.cancelled:
            return False
        if message is None:
            return True
        self._unsent += len(message) + RESPONSE_OVERHEAD
        self._waiting += 1
        if self._unsent > self._max_unsent and self._waiting > 2:
            self._cancel()
            return False
        return True

    def _sent(self, message: bytes) -> None:
        self._unsent -= len(message) + RESPONSE_OVERHEAD
        self._waiting -= 1

    def _cancel(self) -> None:
        log.warning("ModelStreamInfer cancelled: %d responses (%d bytes) waiting for the client to "
                    "read them, more than --grpc-max-stream-unsent-size=%d", self._waiting,
                    self._unsent, self._max_unsent)
        self.cancelled = True
        self._stop()
        self._held.clear()
        while not self._outbox.empty():
            self._outbox.get_nowait()
        self._outbox.put_nowait(_CANCELLED)

    def _fail(self, error: WorkbenchError) -> None:
        """``triton_grpc_error`` mode: end the stream with ``error`` after the responses already
        queued; nothing more is queued (the requests in flight are cancelled when ``run`` ends)."""
        log.debug("ModelStreamInfer ended by a failed request (triton_grpc_error): %s", error.message)
        self.cancelled = True
        self._held.clear()
        self._outbox.put_nowait(StreamFailed(error))

    def _put(self, item: _Out) -> None:
        """Queue an unordered response (a decoupled model's)."""
        if self._counted(item.message if isinstance(item, _Traced) else item):
            self._outbox.put_nowait(item)

    async def _read(self, request_iterator: AsyncIterator[pb.ModelInferRequest]) -> None:
        try:
            index = 0
            messages = aiter(request_iterator)
            while True:
                wait_ns = time.monotonic_ns() if self.server.tracer.enabled else 0
                try:
                    message = await anext(messages)
                except StopAsyncIteration:
                    break
                read = (wait_ns, time.monotonic_ns()) if wait_ns else None
                task = asyncio.create_task(self._serve(message, index, read))
                self._tasks.add(task)
                task.add_done_callback(self._finished)
                index += 1
        finally:
            self._reading = False
            self._maybe_end()

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._maybe_end()

    def _maybe_end(self) -> None:
        if not self._reading and not self._tasks and not self.cancelled:
            self._outbox.put_nowait(_END)

    def _sample(self, model: str, read: tuple[int, int]) -> RequestTrace | None:
        """The request's trace when sampled, with its read timestamps."""
        trace = self.server.tracer.sample(model, self._carrier)
        if trace is not None:
            trace.stamp("GRPC_WAITREAD_START", read[0])
            trace.stamp("GRPC_WAITREAD_END", read[1])
            self._traces.add(trace)
        return trace

    async def _serve(self, message: pb.ModelInferRequest, index: int, read: tuple[int, int] | None) -> None:
        """Run one request of the stream; ``read``: its wait-for-read and read times when
        tracing is on."""
        ordered = True
        trace = None
        engine = False  # the request reached the engine (its errors end a triton_grpc_error stream)
        try:
            request, empty_final = decode_request(message)
            if isinstance(self._forwarded, WorkbenchError):
                raise self._forwarded
            if self._forwarded:
                request.parameters.update(self._forwarded)
            config = await self.server.model_config(request.model_name, request.model_version)
            if read is not None:
                trace = request.trace = self._sample(request.model_name, read)
            engine = True
            if config.model_transaction_policy.decoupled:
                ordered = False
                self._release(index, None)  # later ordered responses need not wait for this one
                await self._stream_decoupled(request, empty_final, trace)
                return
            response = await self.server.infer(request)
            answer = pb.ModelStreamInferResponse(
                infer_response=encode_response(response, final=True)).SerializeToString()
            if trace is not None:
                trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
                self._release(index, _Traced(answer, trace, True))
                return
            self._release(index, answer)
            return
        except WorkbenchError as exc:
            if engine and self._grpc_error:
                if not self.cancelled:
                    self._fail(exc)
                return
            error = exc.message
        except Exception as exc:  # noqa: BLE001  # the error boundary's text (it logs the bug)
            error = failure(exc, "ModelStreamInfer").message
        failed = pb.ModelInferResponse(
            id=message.id, model_name=message.model_name, model_version=message.model_version
        )
        failed.parameters["triton_final_response"].bool_param = True
        serialized = pb.ModelStreamInferResponse(error_message=error, infer_response=failed).SerializeToString()
        reply: _Out = serialized if trace is None else _Traced(serialized, trace, True)
        if ordered:
            self._release(index, reply)
        else:
            self._put(reply)

    async def _stream_decoupled(self, request, empty_final: bool, trace: RequestTrace | None) -> None:
        first = True
        async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
            async for response in responses:
                if trace is not None and first:
                    trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
                    first = False
                if response.outputs or not response.final or empty_final:
                    message = _stream_response(response)
                    self._put(message if trace is None else _Traced(message, trace, False))
        if trace is not None:  # released once the responses before are written
            self._put(_Traced(None, trace, True))

    def _release(self, index: int, message: _Out | None) -> None:
        """Hand over request ``index``'s ordered response (None: it has none to order)."""
        if self.cancelled:
            return
        if message is not None and not self._counted(message.message if isinstance(message, _Traced) else message):
            return
        self._held[index] = message
        while self._next_ordered in self._held:
            held = self._held.pop(self._next_ordered)
            if held is not None:
                self._outbox.put_nowait(held)
            self._next_ordered += 1


def _stream_response(response: InferenceResponse) -> bytes:
    """The serialized ``ModelStreamInferResponse`` of one engine response (bytes take a
    twentieth of the memory of a waiting protobuf message)."""
    return pb.ModelStreamInferResponse(
        infer_response=encode_response(response, final=response.final)).SerializeToString()
