"""``ModelStreamInfer``: many requests on one bidirectional stream, 0..n responses each.

Requests run concurrently. Responses of non-decoupled models leave in request order
(Triton adds preserve-ordering to a non-decoupled stream); those of decoupled models
leave as the model sends them, interleaved across requests, in the order the model sent
them within one request (Triton's ``ModelStreamInferHandler``). Every response carries
``triton_final_response`` (true on a request's last one); a decoupled request closed
without a last response gets an empty final response only when the client asked with
``triton_enable_empty_final_response``. A failed request answers ``error_message`` and the
stream stays open; closing or cancelling the stream cancels the requests in flight.

Tracing (``--trace-config``), as Triton's stream handler: each request of the stream is
sampled on its own (once its model is known) and gets one trace: ``GRPC_WAITREAD_START`` (the
stream began waiting for this message: at the start, or when the previous one was read),
``GRPC_WAITREAD_END`` (the message read), ``INFER_RESPONSE_COMPLETE`` (the engine's first
response), then ``GRPC_SEND_START`` / ``GRPC_SEND_END`` around each response written (a
decoupled request's 0..n responses each; an empty final response that is not sent has none).
The trace is written once the request's last response is written (or the stream ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import TypeAlias

from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceResponse, Server, WorkbenchError
from workbench.frontends.grpc.codec import decode_request, encode_response
from workbench.tracing import RequestTrace

log = logging.getLogger(__name__)

_END = object()


class _Traced:
    """An outbox entry of a traced request: ``message`` to write (None: nothing), then the
    trace's release when ``last``."""

    __slots__ = ("last", "message", "trace")

    def __init__(self, message: pb.ModelStreamInferResponse | None, trace: RequestTrace, last: bool) -> None:
        self.message = message
        self.trace = trace
        self.last = last


#: what the outbox holds: a message to write, a traced one, or _END
_Out: TypeAlias = "pb.ModelStreamInferResponse | _Traced"


class StreamSession:
    """The state of one ``ModelStreamInfer`` call: in-flight requests and their outbox."""

    def __init__(self, server: Server, forwarded: dict[str, str] | WorkbenchError | None = None,
                 carrier: Mapping[str, str] | None = None) -> None:
        """``forwarded``: the stream's metadata forwarded as parameters of each request
        (``--grpc-header-forward-pattern``), or the error that fails each request;
        ``carrier``: the stream's metadata for the trace sampling (an OpenTelemetry
        ``traceparent``; None when no setting reads it)."""
        self.server = server
        self._forwarded = forwarded
        self._carrier = carrier
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._next_ordered = 0
        self._held: dict[int, _Out | None] = {}
        self._reading = True
        #: traces not released yet (released when the stream ends early)
        self._traces: set[RequestTrace] = set()

    async def run(self, request_iterator: AsyncIterator[pb.ModelInferRequest]):
        """Yield every ``ModelStreamInferResponse`` until the client closes its side and every
        request has finished; a broken request stream ends the RPC with its error."""
        reader = asyncio.create_task(self._read(request_iterator))
        try:
            while (item := await self._outbox.get()) is not _END:
                if not isinstance(item, _Traced):
                    yield item
                    continue
                if item.message is not None:
                    item.trace.stamp("GRPC_SEND_START", time.monotonic_ns())
                    yield item.message  # grpc.aio resumes this generator once it is written
                    item.trace.stamp("GRPC_SEND_END", time.monotonic_ns())
                if item.last:
                    self._traces.discard(item.trace)
                    item.trace.release()
            await reader
        finally:
            reader.cancel()
            for task in self._tasks:
                task.cancel()
            for trace in self._traces:  # the stream ended before these requests did
                trace.release()
            self._traces.clear()

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
        if not self._reading and not self._tasks:
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
        try:
            request, empty_final = decode_request(message)
            if isinstance(self._forwarded, WorkbenchError):
                raise self._forwarded
            if self._forwarded:
                request.parameters.update(self._forwarded)
            config = await self.server.model_config(request.model_name, request.model_version)
            if read is not None:
                trace = request.trace = self._sample(request.model_name, read)
            if config.model_transaction_policy.decoupled:
                ordered = False
                self._release(index, None)  # later ordered responses need not wait for this one
                await self._stream_decoupled(request, empty_final, trace)
                return
            response = await self.server.infer(request)
            answer = pb.ModelStreamInferResponse(infer_response=encode_response(response, final=True))
            if trace is not None:
                trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
                self._release(index, _Traced(answer, trace, True))
                return
            self._release(index, answer)
            return
        except WorkbenchError as exc:
            error = exc.message
        except Exception as exc:
            log.exception("internal error in ModelStreamInfer")
            error = f"internal error: {type(exc).__name__}: {exc}"
        failed = pb.ModelInferResponse(
            id=message.id, model_name=message.model_name, model_version=message.model_version
        )
        failed.parameters["triton_final_response"].bool_param = True
        reply: _Out = pb.ModelStreamInferResponse(error_message=error, infer_response=failed)
        if trace is not None:
            reply = _Traced(reply, trace, True)
        if ordered:
            self._release(index, reply)
        else:
            self._outbox.put_nowait(reply)

    async def _stream_decoupled(self, request, empty_final: bool, trace: RequestTrace | None) -> None:
        first = True
        async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
            async for response in responses:
                if trace is not None and first:
                    trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
                    first = False
                if response.outputs or not response.final or empty_final:
                    message = _stream_response(response)
                    self._outbox.put_nowait(message if trace is None else _Traced(message, trace, False))
        if trace is not None:  # released once the responses before are written
            self._outbox.put_nowait(_Traced(None, trace, True))

    def _release(self, index: int, message: _Out | None) -> None:
        """Hand over request ``index``'s ordered response (None: it has none to order)."""
        self._held[index] = message
        while self._next_ordered in self._held:
            held = self._held.pop(self._next_ordered)
            if held is not None:
                self._outbox.put_nowait(held)
            self._next_ordered += 1


def _stream_response(response: InferenceResponse) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(infer_response=encode_response(response, final=response.final))
