"""A loaded model version: its config, tensor specs, scheduler and statistics (Triton's Model)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncGenerator, Awaitable, Mapping, Sequence

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ModelInstance
from workbench.common.errors import DecoupledNotSupported, WorkbenchError
from workbench.engine.inference.classification import classify
from workbench.engine.inference.model_io import ModelIO
from workbench.engine.inference.response_cache import ResponseCache
from workbench.engine.inference.validation import validate_request
from workbench.messages.types import InferenceRequest, InferenceResponse, Tensor
from workbench.scheduling.base import InstanceScheduler, Scheduler, SequenceScheduler
from workbench.stats.statistics import ComputeTotals, MemoryUsage, ModelStatistics, sum_memory

#: one token per loaded model version: cache keys never match across reloads
_CACHE_OWNERS = itertools.count(1)


class LoadedModel:
    """One READY version of a model. Owns exactly one scheduler.

    Args:
        config: the normalized, validated model config.
        version: version number (the version folder's name).
        scheduler: the scheduler that owns this version's instances.
        statistics: this version's counters (also given to the scheduler).
        cache: the server's response cache (used when the config enables it).
        labels: classification labels by output name (``label_filename``).
        fingerprint: the version's files as loaded (what a reload compares to update the
            instances in place; "" = never updated in place).
        instance_memory: the memory each instance holds (the loader's figures); the
            statistics' ``memory_usage`` is their sum and follows instance updates (Triton's
            ``AccumulatedInstanceMemoryUsage``).
    """

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        scheduler: Scheduler,
        statistics: ModelStatistics,
        cache: ResponseCache | None = None,
        labels: dict[str, list[str]] | None = None,
        fingerprint: str = "",
        instance_memory: Mapping[ModelInstance, list[MemoryUsage]] | None = None,
    ) -> None:
        self.config = config
        self._instance_memory = dict(instance_memory or {})
        self.fingerprint = fingerprint
        self.version = version
        self.version_str = str(version)
        self.io = ModelIO(config)
        self.scheduler = scheduler
        #: the scheduler again when it holds sequence state (a sequence batcher), else None
        self.sequences = scheduler if isinstance(scheduler, SequenceScheduler) else None
        self.statistics = statistics
        self.cache = cache if config.response_cache.enable else None
        self.cache_owner = next(_CACHE_OWNERS)
        self.labels = labels or {}
        #: Triton's ``model_transaction_policy { decoupled: true }``: 0..n responses per request
        self.decoupled = config.model_transaction_policy.decoupled

    @property
    def name(self) -> str:
        return self.config.name

    def instances(self) -> list[ModelInstance]:
        """The instances serving this version now ([] for an ensemble)."""
        scheduler = self.scheduler
        return scheduler.instances() if isinstance(scheduler, InstanceScheduler) else []

    def update_instances(
        self, config: ModelConfig, added: list[ModelInstance], removed: list[ModelInstance],
        memory: Sequence[list[MemoryUsage]] = (),
    ) -> Awaitable[object]:
        """Serve ``config`` (it differs from :attr:`config` only in what needs no reload:
        :mod:`workbench.engine.models.instance_update`) with ``added`` joining the instances and
        ``removed`` leaving them (see
        :meth:`~workbench.scheduling.base.InstanceScheduler.update_instances`; the result
        resolves once those that hold no live sequence have unloaded). ``memory``: what each
        added instance holds (in ``added`` order); the statistics' ``memory_usage`` becomes
        the sum over the instances the version has now.

        Raises:
            TypeError: the scheduler owns no instances (an ensemble).
        """
        scheduler = self.scheduler
        if not isinstance(scheduler, InstanceScheduler):
            raise TypeError(f"the scheduler of '{self.name}' owns no instances")
        done = scheduler.update_instances(added, removed)
        self.config = config
        for instance in removed:
            self._instance_memory.pop(instance, None)
        self._instance_memory.update(zip(added, memory, strict=False))
        self.statistics.memory_usage = sum_memory(
            usage for usages in self._instance_memory.values() for usage in usages)
        return done

    def holds_sequence(self, correlation_id: int | str) -> bool:
        """True while this version's sequence batcher holds the live sequence
        ``correlation_id`` (False without a sequence batcher)."""
        return self.sequences is not None and self.sequences.holds_sequence(correlation_id)

    def live_sequences(self) -> int:
        """How many sequences are live in this version (0 without a sequence batcher)."""
        return self.sequences.live_sequences() if self.sequences is not None else 0

    async def infer(
        self,
        request: InferenceRequest,
        arrival_ns: int,
        compute_totals: ComputeTotals | None = None,
    ) -> InferenceResponse:
        """Validate, queue and run ``request``; outputs come back in requested order.

        ``compute_totals``: given when ``request`` is a step of an ensemble request; the
        request's compute durations are added there when it succeeds.

        Raises:
            InvalidArgument: the request does not match the model config (Triton's texts).
            WorkbenchError: the execution failed.
        """
        backend_request = self._validated(request, arrival_ns)
        try:
            if self.cache is None:
                result = await self.scheduler.enqueue(backend_request, arrival_ns,
                                                      compute_totals=compute_totals, trace=request.trace)
                return self._response(request, backend_request, result.outputs, result.parameters)
            return await self._infer_cached(request, backend_request, arrival_ns, compute_totals)
        except asyncio.CancelledError:  # the caller stopped waiting: tell the backend
            backend_request.cancel.cancel()
            raise

    def _validated(self, request: InferenceRequest, arrival_ns: int):
        """The backend request for ``request`` (its trace, when sampled, started); a request
        that fails validation is counted as a failure (reason OTHER) and its ``InvalidArgument``
        raised."""
        try:
            backend_request = validate_request(request, self.io)
        except Exception as exc:
            self.statistics.record_failure(time.monotonic_ns() - arrival_ns, "OTHER")
            if isinstance(exc, WorkbenchError):
                exc.before_execution = True
            raise
        if request.cancel is not None:  # the caller's own (a BLS call's)
            backend_request.cancel = request.cancel
        if request.trace is not None:  # sampled by a frontend (--trace-config)
            request.trace.start(self.name, self.version, request.id, arrival_ns)
            request.trace.report_tensors("TENSOR_QUEUE_INPUT", backend_request.inputs)
        return backend_request

    async def infer_stream(
        self,
        request: InferenceRequest,
        arrival_ns: int,
        compute_totals: ComputeTotals | None = None,
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Every response to ``request``: one for a non-decoupled model; 0..n for a decoupled
        one, as the backend sends them, the last with ``final=True`` (an empty final response,
        no outputs, when the backend closes the request without a response).

        Raises:
            InvalidArgument: the request does not match the model config.
            WorkbenchError: the execution failed, or the backend sent an error response (the
                iteration ends there).
        """
        if not self.decoupled:
            yield await self.infer(request, arrival_ns, compute_totals)
            return
        backend_request = self._validated(request, arrival_ns)
        loop = asyncio.get_running_loop()
        sent: asyncio.Queue = asyncio.Queue()
        open_ = [True]  # False once the consumer closed the stream: later responses are dropped

        def send(response, final: bool) -> None:  # any thread, during or after execute
            if open_[0]:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(sent.put_nowait, (response, final))

        backend_request.response_sender = send
        execution = asyncio.ensure_future(self.scheduler.enqueue(
            backend_request, arrival_ns, compute_totals=compute_totals, trace=request.trace))
        execution.add_done_callback(lambda done: _failed_execution(done, sent))
        ended = False  # the backend ended the request (final response or error)
        try:
            while True:
                response, final = await sent.get()
                ended = final
                if isinstance(response, BaseException):
                    raise response
                if response is not None and response.error is not None:
                    raise response.error
                outputs = response.outputs if response is not None else {}
                parameters = response.parameters if response is not None else {}
                answer = self._response(request, backend_request, outputs, parameters)
                answer.final = final
                yield answer
                if final:
                    return
        finally:
            open_[0] = False
            if not execution.done():
                execution.cancel()
            if not ended:  # the consumer stopped reading: the request is cancelled
                backend_request.cancel.cancel()

    async def infer_once(
        self,
        request: InferenceRequest,
        arrival_ns: int,
        compute_totals: ComputeTotals | None = None,
    ) -> InferenceResponse:
        """:meth:`infer` for any model: a decoupled model must send exactly one response
        (what Triton's HTTP endpoint and ``ModelInfer`` RPC accept).

        Raises:
            DecoupledNotSupported: a decoupled model sent no response or more than one (an
                error response after data counts as one more, as in Triton).
            WorkbenchError: the model's error, when that error is its only response.
        """
        if not self.decoupled:
            return await self.infer(request, arrival_ns, compute_totals)
        stream = self.infer_stream(request, arrival_ns, compute_totals)
        responses: list[InferenceResponse] = []
        try:
            async for response in stream:
                if response.outputs:
                    responses.append(response)
        except WorkbenchError:
            if not responses:  # the error is the request's one response: the client gets it
                raise
            responses.append(response)  # data, then an error response: more than one
        if len(responses) != 1:
            raise DecoupledNotSupported(
                f"decoupled model '{self.name}' sent {len(responses)} responses; only a single "
                "response can be returned outside a stream"
            )
        responses[0].final = True
        return responses[0]

    async def _infer_cached(
        self, request: InferenceRequest, backend_request, arrival_ns: int,
        compute_totals: ComputeTotals | None,
    ) -> InferenceResponse:
        assert self.cache is not None
        start = time.monotonic_ns()
        key = ResponseCache.key(self.cache_owner, backend_request)
        outputs = self.cache.lookup(key)
        looked_up = time.monotonic_ns()
        if outputs is not None:
            self.statistics.record_cache_hit(looked_up - arrival_ns, looked_up - start)
            if request.trace is not None:  # answered without queue or compute
                request.trace.stamp("REQUEST_END", looked_up)
            return self._response(request, backend_request, outputs)
        result = await self.scheduler.enqueue(backend_request, arrival_ns,
                                              compute_totals=compute_totals, trace=request.trace)
        insert_start = time.monotonic_ns()
        self.cache.insert(key, self.cache_owner, result.outputs)
        self.statistics.record_cache_miss(looked_up - start + time.monotonic_ns() - insert_start)
        return self._response(request, backend_request, result.outputs, result.parameters)

    def _response(self, request: InferenceRequest, backend_request, outputs: dict,
                  parameters: dict | None = None) -> InferenceResponse:
        specs, batched = self.io.outputs, self.io.max_batch_size > 0
        # per-output parameters only where the request named its outputs (most name none)
        params = {o.name: o.parameters for o in request.outputs} if request.outputs else None
        tensors = []
        classified = False
        for name in backend_request.requested_outputs:
            if name in outputs:  # an output's reshape undone: the client gets the config's dims (Triton)
                array, spec = outputs[name], specs[name]
                output_params = params.get(name, {}) if params else {}
                tensors.append(Tensor(name, spec.wire_of(array), spec.undo_reshape(array, batched), output_params))
                classified = classified or bool(output_params.get("classification"))
        if classified:
            tensors = [self._classified(t) for t in tensors]
        return InferenceResponse(self.name, self.version_str, tensors, request.id, parameters or {})

    def _classified(self, tensor: Tensor) -> Tensor:
        """``tensor`` as its top-K classes when asked (Triton's classification extension)."""
        k = tensor.parameters.get("classification")
        if not k:
            return tensor
        batched = self.io.max_batch_size > 0
        data = classify(tensor.data, tensor.datatype, k, batched, self.labels.get(tensor.name))
        return Tensor(tensor.name, "BYTES", data, tensor.parameters)

    async def stop(self) -> None:
        """Finish queued and executing requests, unload the instances, drop cached responses."""
        await self.scheduler.stop()
        if self.cache is not None:
            self.cache.purge(self.cache_owner)


def _failed_execution(execution: asyncio.Future, sent: asyncio.Queue) -> None:
    """End a decoupled request's response stream when its execution failed or was cancelled."""
    if execution.cancelled():
        return
    error = execution.exception()
    if error is not None:
        sent.put_nowait((error, True))
