"""Triton's ensemble scheduler: an ensemble request runs as a DAG of composing-model requests.

An ensemble (``platform: "ensemble"``, ``ensemble_scheduling { step [...] }``) has no
backend and no instances: its scheduler turns one request into one request per step,
each sent through the engine to the composing model (``step_infer``, handed over by the
engine; scheduling never imports it). So every composing model validates, queues,
batches (its dynamic batcher batches across ensemble requests) and records statistics as
for a client's request. Follows core ``ensemble_scheduler.cc`` (``EnsembleContext``):

- a step runs as soon as every ensemble tensor its ``input_map`` names exists; independent
  steps run concurrently (asyncio tasks on the engine's loop);
- tensors move between steps as the numpy arrays the composing models returned (no
  encoding, no copy); a step asks only for the outputs its ``output_map`` names;
- every step request carries the ensemble request's id and parameters (``priority``, ``timeout``,
  ``sequence_id`` / ``sequence_start`` / ``sequence_end``, custom keys);
- ``model_version: -1`` resolves the composing model's latest READY version per request,
  so reloading a composing model keeps the ensemble serving;
- an omitted optional ensemble input is left out of the step requests that map it;
- the batch dimension is converted per step (``EnsembleContext::ReshapeTensorDims``): every
  ensemble tensor remembers the batch size it was made with (the ensemble request's when it
  batches, the producing step request's when that model batches, else 0 = none). A tensor
  without one that goes to a batching model gets a batch of 1 prepended when its shape
  matches that input's dims; a tensor of batch size 1 that goes to a non-batching model
  loses it when its shape does not match that input's dims; the ensemble's outputs are
  matched to the ensemble's own output dims the same way. So a non-batching ensemble may
  use batching models (and a batching ensemble non-batching ones) as Triton allows;
- a failing step fails its ensemble request with that step's error, unchanged (class and
  message); steps already running finish, no further step starts; other ensemble
  requests are unaffected;
- only the outputs the client asked for are returned; the response carries the parameters
  ``sequence_id`` / ``sequence_start`` / ``sequence_end`` of the request (Triton's ensemble
  adds them to every response, so a client of a stream can tell a sequence's steps apart).

Statistics (Triton's ``RequestTracker``): per ensemble request one ``success`` (request
duration from arrival to the last step's answer) or one failure with reason ``OTHER``;
``queue`` is the time from enqueue to the first step (about 0: an ensemble has no queue);
``compute_input`` / ``compute_infer`` / ``compute_output`` are the sums of the composing
requests' compute durations (nested ensembles included, cache hits adding nothing);
``inference_count`` grows by the request's batch size and ``execution_count`` by one, with
a ``batch_stats`` entry for that batch size. The composing models keep their own counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.datatypes import config_to_wire
from workbench.errors import Cancelled, InternalError, Unavailable
from workbench.scheduling.base import Scheduler
from workbench.statistics import ComputeTotals, ModelStatistics
from workbench.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

#: ``adapt(config)``: a step's request for the composing model version about to run it,
#: given that version's config (its inputs' batch dimension added or dropped to fit it).
StepAdapt = Callable[[ModelConfig], InferenceRequest]

#: ``step_infer(request, compute_totals, adapt)``: run one composing-model request through
#: the engine (model and version resolved per call, by ``request``'s model name and version;
#: the request sent is ``adapt(resolved config)`` when ``adapt`` is given) and add its compute
#: durations to ``compute_totals`` on success. Raises the engine's errors (``ModelNotFound``
#: with "Request for unknown model: ...", ``InvalidArgument``, a backend's error, ...).
StepInfer = Callable[
    [InferenceRequest, ComputeTotals, StepAdapt | None], Awaitable[InferenceResponse]
]


def batch_reshaped(
    config_dims: Sequence[int], config_batching: bool, tensor_batch: int, shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The shape an ensemble tensor takes where a config expects it (Triton's
    ``EnsembleContext::ReshapeTensorDims``).

    Args:
        config_dims: the receiving input's (or ensemble output's) dims, without batch dim.
        config_batching: the receiving model batches (``max_batch_size > 0``).
        tensor_batch: the batch size the tensor was made with (0: none).
        shape: the tensor's shape.

    Returns:
        ``shape`` unchanged, unless exactly one side batches: ``(1, *shape)`` when the
        receiver batches and ``shape`` matches ``config_dims`` (-1 matching anything); or
        ``shape[1:]`` when the receiver does not batch, the tensor has a batch of 1 and
        ``shape`` does not match ``config_dims``.
    """
    if config_batching == (tensor_batch != 0):
        return shape
    if config_batching:
        return (1, *shape) if _dims_match(config_dims, shape) else shape
    if tensor_batch == 1 and not _dims_match(config_dims, shape):
        return shape[1:]
    return shape


def _dims_match(dims: Sequence[int], shape: Sequence[int]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, equal where neither is -1."""
    return len(dims) == len(shape) and all(
        d == s or d == -1 or s == -1 for d, s in zip(dims, shape, strict=True)
    )


def _reshaped(data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return data if data.shape == shape else data.reshape(shape)


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    """One ``ensemble_scheduling.step``.

    Attributes:
        index: position in the config.
        model_name: the composing model.
        model_version: ``""`` for ``-1`` (latest READY version), else the version number.
        inputs: (composing model input, ensemble tensor) pairs, from ``input_map``.
        outputs: (composing model output, ensemble tensor) pairs, from ``output_map``.
        needs: the ensemble tensors that must exist before the step runs (its inputs
            that are not ensemble inputs: those exist from the start, or were omitted).
    """

    index: int
    model_name: str
    model_version: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    needs: tuple[str, ...]


def ensemble_steps(config: ModelConfig) -> tuple[EnsembleStep, ...]:
    """The steps of an ensemble config (maps in key order)."""
    ensemble_inputs = {io.name for io in config.input}
    steps = []
    for index, step in enumerate(config.ensemble_scheduling.step):
        inputs = tuple(sorted(step.input_map.items()))
        steps.append(EnsembleStep(
            index=index,
            model_name=step.model_name,
            model_version="" if step.model_version == -1 else str(step.model_version),
            inputs=inputs,
            outputs=tuple(sorted(step.output_map.items())),
            needs=tuple(t for _, t in inputs if t not in ensemble_inputs),
        ))
    return tuple(steps)


class EnsembleScheduler(Scheduler):
    """Runs each request of one ensemble version as a DAG of composing-model requests.

    Args:
        config: the ensemble's normalized, validated config (checked against its
            composing models by :func:`workbench.config.validate_ensemble.check_ensemble_steps`).
        statistics: the ensemble version's counters.
        step_infer: how a step reaches its composing model (see :data:`StepInfer`).
    """

    def __init__(
        self, config: ModelConfig, statistics: ModelStatistics, step_infer: StepInfer
    ) -> None:
        self.name = config.name
        self.steps = ensemble_steps(config)
        self._batching = config.max_batch_size > 0
        self._input_wire = {io.name: config_to_wire(io.data_type) for io in config.input}
        self._output_dims = {
            io.name: tuple(io.reshape.shape if io.HasField("reshape") else io.dims)
            for io in config.output
        }
        self._infer = step_infer
        self._stats = statistics
        self._inflight = 0
        self._stopping = False
        self._drained: asyncio.Event | None = None

    async def enqueue(self, request: BackendRequest, arrival_ns: int) -> BackendResponse:
        """Run every step of ``request`` and answer with the requested ensemble outputs.

        ``request.inputs`` are the ensemble inputs (numpy, batch dim first when the
        ensemble batches); the response holds ``request.requested_outputs``.

        Raises:
            Unavailable: the ensemble is being unloaded.
            WorkbenchError: the first failing step's error, unchanged (e.g. ``ModelNotFound``
                "Request for unknown model: 'm' has no available versions" when a composing
                model was unloaded, or the composing model's validation or backend error).
            InternalError: a requested output was not produced (a composing model returned
                fewer outputs than asked).
        """
        if self._stopping:
            raise Unavailable("model is being unloaded; request rejected")
        enqueue_ns = time.monotonic_ns()
        self._inflight += 1
        totals = ComputeTotals()
        compute_start_ns = time.monotonic_ns()
        try:
            tensors, batches = await self._run(request, totals)
            outputs = {}
            for name in request.requested_outputs:
                tensor = tensors.get(name)
                if tensor is None:
                    raise InternalError(
                        f"in ensemble {self.name}, ensemble output '{name}' was not produced"
                    )
                shape = batch_reshaped(self._output_dims.get(name, tensor.data.shape),
                                       self._batching, batches[name], tensor.data.shape)
                outputs[name] = _reshaped(tensor.data, shape)
        except BaseException:
            self._stats.record_failure(time.monotonic_ns() - arrival_ns, "OTHER")
            if request.trace is not None:
                _trace_ensemble(request, enqueue_ns, None)
            raise
        finally:
            self._forget()
        if request.trace is not None:  # a sampled request: its steps have child traces
            _trace_ensemble(request, enqueue_ns, outputs)
        self._stats.record_success(
            time.monotonic_ns() - arrival_ns,
            compute_start_ns - enqueue_ns,
            totals.input_ns,
            totals.infer_ns,
            totals.output_ns,
        )
        batch = request.batch_size if self._batching else 1
        self._stats.record_execution(batch, totals.input_ns, totals.infer_ns, totals.output_ns)
        if request.compute_totals is not None:  # this ensemble is a step of another one
            request.compute_totals.add(totals.input_ns, totals.infer_ns, totals.output_ns)
        return BackendResponse(outputs, parameters=sequence_parameters(request.parameters))

    def inflight_count(self) -> int:
        return self._inflight

    async def stop(self) -> None:
        """Refuse new requests and wait for the in-flight ones (their steps still run)."""
        self._stopping = True
        if self._inflight:
            self._drained = asyncio.Event()
            await self._drained.wait()

    # ----------------------------------------------------------------- DAG execution
    async def _run(
        self, request: BackendRequest, totals: ComputeTotals
    ) -> tuple[dict[str, Tensor], dict[str, int]]:
        """Run the steps as their inputs appear; the ensemble tensors by name, and the batch
        size each was made with (0: none)."""
        tensors = {
            name: Tensor(name, self._input_wire[name], array)
            for name, array in request.inputs.items()
        }
        batch = request.batch_size if self._batching else 0
        batches = dict.fromkeys(tensors, batch)

        def made(result: tuple[dict[str, Tensor], int]) -> None:
            tensors.update(result[0])
            batches.update(dict.fromkeys(result[0], result[1]))
        waiting = list(self.steps)
        running: dict[asyncio.Task[tuple[dict[str, Tensor], int]], EnsembleStep] = {}
        error: BaseException | None = None
        try:
            while True:
                if error is None and waiting:
                    ready = [s for s in waiting if all(t in tensors for t in s.needs)]
                    for step in ready:
                        waiting.remove(step)
                    if len(ready) == 1 and not running:  # a chain: no task needed; an error propagates
                        made(await self._call(ready[0], tensors, batches, request, totals))
                        continue
                    for step in ready:
                        call = self._call(step, tensors, batches, request, totals)
                        task = asyncio.ensure_future(call)
                        running[task] = step
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.pop(task)
                    if task.cancelled():
                        error = error or Cancelled("request cancelled")
                    elif task.exception() is not None:
                        error = error or task.exception()
                    else:
                        made(task.result())
        finally:
            for task in running:  # only when this request itself is cancelled
                task.cancel()
        if error is not None:
            raise error
        return tensors, batches

    async def _call(
        self,
        step: EnsembleStep,
        tensors: dict[str, Tensor],
        batches: dict[str, int],
        request: BackendRequest,
        totals: ComputeTotals,
    ) -> tuple[dict[str, Tensor], int]:
        """One step: its request to the composing model; the ensemble tensors it made and
        the batch size of that request (0 when the model does not batch). A traced ensemble
        request gives the step a child trace (Triton's ``parent_id``)."""
        step_batch = 0
        trace = request.trace.spawn() if request.trace is not None else None

        def adapt(config: ModelConfig) -> InferenceRequest:
            nonlocal step_batch
            batching = config.max_batch_size > 0
            dims = {io.name: tuple(io.dims) for io in config.input}
            inputs = []
            for model_input, name in step.inputs:
                tensor = tensors.get(name)
                if tensor is None:  # an omitted optional input
                    continue
                data = tensor.data
                if model_input in dims:
                    shape = batch_reshaped(dims[model_input], batching, batches[name], data.shape)
                    data = _reshaped(data, shape)
                inputs.append(Tensor(model_input, tensor.datatype, data))
            first = inputs[0].data if inputs else None
            step_batch = int(first.shape[0]) if batching and first is not None and first.ndim else 0
            return InferenceRequest(
                step.model_name,
                inputs,
                model_version=step.model_version,
                outputs=[RequestedOutput(model_output) for model_output, _ in step.outputs],
                id=request.request_id,
                parameters=dict(request.parameters),
                trace=trace,
            )

        step_request = InferenceRequest(
            step.model_name, [], model_version=step.model_version,
            id=request.request_id, parameters=dict(request.parameters), trace=trace,
        )
        response = await self._infer(step_request, totals, adapt)
        answered = {tensor.name: tensor for tensor in response.outputs}
        made = {
            name: Tensor(name, answered[model_output].datatype, answered[model_output].data)
            for model_output, name in step.outputs
            if model_output in answered
        }
        return made, step_batch

    def _forget(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()


def sequence_parameters(parameters: dict[str, object]) -> dict[str, object]:
    """The response parameters Triton's ensemble gives every response built from its steps'
    outputs (``EnsembleContext``: the steps' correlation ID and flags): ``sequence_id``
    (int64: a uint64 ID above 2**63 - 1 wraps as Triton's cast does; a string ID stays a
    string; 0 without one), ``sequence_start`` and ``sequence_end`` (bool)."""
    corr = parameters.get("sequence_id", 0)
    if isinstance(corr, bool) or not isinstance(corr, (int, str)):
        corr = 0
    if isinstance(corr, int) and corr >= 2**63:
        corr -= 2**64
    return {"sequence_id": corr, "sequence_start": bool(parameters.get("sequence_start", False)),
            "sequence_end": bool(parameters.get("sequence_end", False))}


def _trace_ensemble(request: BackendRequest, enqueue_ns: int, outputs: dict[str, np.ndarray] | None) -> None:
    """A traced ensemble request is done: ``QUEUE_START``, its outputs (on success) and
    ``REQUEST_END``; the steps reported their own timestamps in their child traces."""
    trace = request.trace
    assert trace is not None
    trace.stamp("QUEUE_START", enqueue_ns)
    if outputs is not None:
        trace.report_tensors("TENSOR_BACKEND_OUTPUT", outputs)
    trace.stamp("REQUEST_END", time.monotonic_ns())


__all__ = [
    "EnsembleScheduler", "EnsembleStep", "StepAdapt", "StepInfer", "batch_reshaped",
    "ensemble_steps", "sequence_parameters",
]
