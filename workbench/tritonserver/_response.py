"""Triton's ``InferenceResponse`` and the iterators ``model.infer`` (blocking) and
``model.async_infer`` (asyncio) return.

Both read the engine's response stream (:meth:`workbench.Server.infer_stream`), which runs on
the engine's loop (:mod:`workbench.tritonserver._loop`): a decoupled model's responses arrive
one by one as it sends them, the last with ``final=True`` (a model that closes its request
with an empty final response gives one without outputs, as Triton's). ``cancel()`` cancels
the request in the engine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import workbench
from workbench.tritonserver._errors import TritonError, triton_error
from workbench.tritonserver._loop import EngineLoop
from workbench.tritonserver._refs import ModelRef
from workbench.tritonserver._request import InferenceRequest
from workbench.tritonserver._tensor import Tensor, tensor_from_engine

#: errors the engine raises before the model runs: Triton's C API returns them from
#: ``TRITONSERVER_ServerInferAsync``, so ``model.infer`` raises them at once
REQUEST_ERRORS = (workbench.ModelNotFound, workbench.ModelNotReady, workbench.ServerNotReady,
                  workbench.InvalidArgument)


@dataclass
class InferenceResponse:
    """One response: ``outputs`` by name (:class:`Tensor`), ``parameters``, ``error`` (a
    :class:`TritonError` when the model failed and ``raise_on_error`` is False), and
    ``final`` (the request's last response)."""

    model: ModelRef
    request_id: str | None = None
    parameters: dict[str, str | int | bool] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    error: TritonError | None = None
    classification_label: str | None = None
    final: bool = False


def _response(model: ModelRef, request: InferenceRequest, item: workbench.InferenceResponse | BaseException
              ) -> InferenceResponse:
    if isinstance(item, BaseException):
        error = triton_error(item) if isinstance(item, workbench.WorkbenchError) else \
            TritonError(f"Unexpected error in the engine: {item!r}")
        result = InferenceResponse(model, request.request_id, error=error, final=True)
        error.args += (result,)
        return result
    version = int(item.model_version) if item.model_version.isdigit() else model.version
    return InferenceResponse(
        model.at_version(item.model_name, version), item.id or request.request_id,
        parameters=dict(item.parameters),
        outputs={t.name: tensor_from_engine(t.datatype, t.data) for t in item.outputs},
        final=item.final)


class _Stream:
    """The engine side of one request: runs :meth:`workbench.Server.infer_stream` on the
    engine's loop and hands each response (or the error ending it) to ``deliver``, then
    ``None`` when the stream ended."""

    def __init__(self, engine: workbench.Server, loop: EngineLoop, request: workbench.InferenceRequest,
                 deliver: Callable[[workbench.InferenceResponse | BaseException | None], None]) -> None:
        self.request = request
        self._deliver = deliver
        self._engine = engine
        self.future: concurrent.futures.Future[None] = loop.submit(self._run())

    async def _run(self) -> None:
        final = False
        try:
            async for response in self._engine.infer_stream(self.request):
                final = response.final
                self._deliver(response)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every error goes to the reader
            self._deliver(exc)
            final = True
        if not final:  # the stream ended without a final flag: send Triton's empty final one
            self._deliver(workbench.InferenceResponse(self.request.model_name, self.request.model_version,
                                                      [], id=self.request.id, final=True))
        self._deliver(None)

    def cancel(self) -> None:
        assert self.request.cancel is not None
        self.request.cancel.cancel()
        self.future.cancel()


class _Responses:
    """What both iterators share: an engine item made a response, the end noted."""

    _model: ModelRef
    _request: InferenceRequest
    _raise_on_error: bool
    _complete: bool

    def _answer(self, item: Any) -> InferenceResponse:
        response = _response(self._model, self._request, item)
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response


class ResponseIterator(_Responses):
    """The blocking iterator of ``model.infer``: ``for response in model.infer(...)``.

    Raises (from ``next``): the response's :class:`TritonError` when ``raise_on_error``."""

    def __init__(self, model: ModelRef, request: InferenceRequest, raise_on_error: bool) -> None:
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._complete = False
        self._first: Any = None
        user_queue = request.response_queue
        self._user_queue = user_queue if isinstance(user_queue, queue.SimpleQueue) else None
        cancel = workbench.CancelSignal()
        self._stream = _Stream(model.server.engine, model.server.engine_loop,
                               request.engine_request(cancel), self._deliver)
        first = self._queue.get()  # Triton's InferAsync refuses a bad request at once
        if isinstance(first, REQUEST_ERRORS):
            raise triton_error(first)
        self._first = first

    def _deliver(self, item: Any) -> None:
        if self._user_queue is not None and item is not None:
            self._user_queue.put(_response(self._model, self._request, item))
        self._queue.put(item)

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        if self._first is not None:
            item, self._first = self._first, None
        else:
            item = self._queue.get()
        if item is None:
            self._complete = True
            raise StopIteration
        return self._answer(item)

    def cancel(self) -> None:
        """Cancel the request (Triton's ``TRITONSERVER_InferenceRequestCancel``)."""
        self._stream.cancel()


class AsyncResponseIterator(_Responses):
    """The asyncio iterator of ``model.async_infer``: ``async for response in ...``, on the
    caller's running loop (a kernel's, an application's), never blocking it.

    Raises (from ``__anext__``): the request's errors and, with ``raise_on_error``, a
    response's :class:`TritonError`."""

    def __init__(self, model: ModelRef, request: InferenceRequest, raise_on_error: bool) -> None:
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._complete = False
        user_queue = request.response_queue
        self._user_queue = user_queue if isinstance(user_queue, asyncio.Queue) else None
        cancel = workbench.CancelSignal()
        self._stream = _Stream(model.server.engine, model.server.engine_loop,
                               request.engine_request(cancel), self._deliver)

    def _deliver(self, item: Any) -> None:  # on the engine's thread
        self._loop.call_soon_threadsafe(self._put, item)

    def _put(self, item: Any) -> None:  # on the caller's loop
        if self._user_queue is not None and item is not None:
            self._user_queue.put_nowait(_response(self._model, self._request, item))
        self._queue.put_nowait(item)

    def __aiter__(self) -> AsyncResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._complete = True
            raise StopAsyncIteration
        if isinstance(item, REQUEST_ERRORS):
            self._complete = True
            raise triton_error(item)
        return self._answer(item)

    def cancel(self) -> None:
        """Cancel the request."""
        self._stream.cancel()


__all__ = ["AsyncResponseIterator", "InferenceResponse", "ResponseIterator"]
