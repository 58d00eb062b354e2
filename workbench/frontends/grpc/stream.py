"""``ModelStreamInfer``: many requests on one bidirectional stream, 0..n responses each.

Requests run concurrently. Responses of non-decoupled models leave in request order
(Triton adds preserve-ordering to a non-decoupled stream); those of decoupled models
leave as the model sends them, interleaved across requests, in the order the model sent
them within one request (Triton's ``ModelStreamInferHandler``). Every response carries
``triton_final_response`` (true on a request's last one); a decoupled request closed
without a last response gets an empty final response only when the client asked with
``triton_enable_empty_final_response``. A failed request answers ``error_message`` and the
stream stays open; closing or cancelling the stream cancels the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceResponse, Server, WorkbenchError
from workbench.frontends.grpc.codec import decode_request, encode_response

log = logging.getLogger(__name__)

_END = object()


class StreamSession:
    """The state of one ``ModelStreamInfer`` call: in-flight requests and their outbox."""

    def __init__(self, server: Server, forwarded: dict[str, str] | WorkbenchError | None = None) -> None:
        """``forwarded``: the stream's metadata forwarded as parameters of each request
        (``--grpc-header-forward-pattern``), or the error that fails each request."""
        self.server = server
        self._forwarded = forwarded
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._next_ordered = 0
        self._held: dict[int, pb.ModelStreamInferResponse | None] = {}
        self._reading = True

    async def run(self, request_iterator: AsyncIterator[pb.ModelInferRequest]):
        """Yield every ``ModelStreamInferResponse`` until the client closes its side and every
        request has finished; a broken request stream ends the RPC with its error."""
        reader = asyncio.create_task(self._read(request_iterator))
        try:
            while (message := await self._outbox.get()) is not _END:
                yield message
            await reader
        finally:
            reader.cancel()
            for task in self._tasks:
                task.cancel()

    async def _read(self, request_iterator: AsyncIterator[pb.ModelInferRequest]) -> None:
        try:
            index = 0
            async for message in request_iterator:
                task = asyncio.create_task(self._serve(message, index))
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

    async def _serve(self, message: pb.ModelInferRequest, index: int) -> None:
        ordered = True
        try:
            request, empty_final = decode_request(message)
            if isinstance(self._forwarded, WorkbenchError):
                raise self._forwarded
            if self._forwarded:
                request.parameters.update(self._forwarded)
            config = await self.server.model_config(request.model_name, request.model_version)
            if config.model_transaction_policy.decoupled:
                ordered = False
                self._release(index, None)  # later ordered responses need not wait for this one
                await self._stream_decoupled(request, empty_final)
                return
            response = await self.server.infer(request)
            self._release(index, pb.ModelStreamInferResponse(infer_response=encode_response(response, final=True)))
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
        answer = pb.ModelStreamInferResponse(error_message=error, infer_response=failed)
        if ordered:
            self._release(index, answer)
        else:
            self._outbox.put_nowait(answer)

    async def _stream_decoupled(self, request, empty_final: bool) -> None:
        async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
            async for response in responses:
                if response.outputs or not response.final or empty_final:
                    self._outbox.put_nowait(_stream_response(response))

    def _release(self, index: int, message: pb.ModelStreamInferResponse | None) -> None:
        """Hand over request ``index``'s ordered response (None: it has none to order)."""
        self._held[index] = message
        while self._next_ordered in self._held:
            held = self._held.pop(self._next_ordered)
            if held is not None:
                self._outbox.put_nowait(held)
            self._next_ordered += 1


def _stream_response(response: InferenceResponse) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(infer_response=encode_response(response, final=response.final))
