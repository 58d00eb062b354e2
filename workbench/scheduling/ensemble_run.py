"""One ensemble request as a data flow of composing-model responses (Triton's
``EnsembleContext`` in core ``ensemble_scheduler.cc``).

Every ensemble tensor holds a series of values, one per *iteration*: an ensemble input has
one (iteration 0); each response of a decoupled step adds the next one to its output
tensors; a non-decoupled step's outputs take the iteration of its inputs. A step runs for
iteration ``k`` once each input has a value ``k``; the ensemble answers for ``k`` once every
requested output has one. A value is dropped once everything that takes it used it.

- Placeholders: an omitted optional input, or an output a model did not return; the steps
  taking it run without it, the response leaves it out. Steps leading to no requested
  output do not run (:meth:`EnsembleGraph.consumers_for`).
- Sequence parameters: a step runs with the ID and flags of its first step-made input, else
  the request's; its outputs carry its response's (Triton's ``parameter_override``).
- ``max_inflight_requests``: per step, across the ensemble's requests (Triton's
  ``StepInflightRequestLimiter``).
- A decoupled ensemble's response formed with no step request in flight carries the final
  flag (Triton's ``FinishEnsemble``); else the flag is sent alone after the last step.
- A failing step fails the request with its error class, prefixed "in ensemble 'E', "; no
  further step starts, those in flight finish first.

User view: docs/ensembles.md."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.common.errors import Cancelled, InternalError, InvalidArgument, WorkbenchError
from workbench.messages.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from workbench.scheduling.ensemble_steps import (
    EnsembleGraph,
    EnsembleStep,
    StepInfer,
    batch_reshaped,
)
from workbench.stats.statistics import ComputeTotals

if TYPE_CHECKING:
    from workbench.tracing.records import RequestTrace

log = logging.getLogger(__name__)

#: the request parameters a step's response may override for the steps it feeds
SEQUENCE_KEYS = ("sequence_id", "sequence_start", "sequence_end")
#: a step's sequence parameters when the request has no sequence (Triton: ID 0, no flags)
NO_SEQUENCE: Mapping[str, Any] = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


def step_sequence(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The three sequence parameters a step's tensors carry, from ``parameters`` (a request's
    or a response's): ``sequence_id`` (0 without), ``sequence_start`` / ``sequence_end``
    (false without)."""
    return {"sequence_id": parameters.get("sequence_id", 0),
            "sequence_start": bool(parameters.get("sequence_start", False)),
            "sequence_end": bool(parameters.get("sequence_end", False))}


@dataclass(frozen=True, slots=True)
class EnsemblePlan:
    """What every request of one ensemble version shares.

    Attributes:
        name: the ensemble.
        graph: its steps and tensor consumers.
        batching: the ensemble batches (``max_batch_size > 0``).
        input_wire: wire data type of each ensemble input.
        output_dims: each ensemble output's dims (its ``reshape`` when it has one).
        infer: how a step reaches its composing model.
        limiters: one semaphore per step when ``max_inflight_requests`` > 0, else empty.
        decoupled: the ensemble is decoupled (a decoupled step feeds it); else a lone ready
            step runs inline, without a task of its own.
    """

    name: str
    graph: EnsembleGraph
    batching: bool
    input_wire: Mapping[str, str]
    output_dims: Mapping[str, tuple[int, ...]]
    infer: StepInfer
    limiters: Sequence[asyncio.Semaphore]
    decoupled: bool


@dataclass(slots=True)
class _Value:
    """One value of an ensemble tensor: None for a placeholder; ``refs`` users left."""

    tensor: Tensor | None
    refs: int
    sequence: dict[str, Any]


@dataclass(slots=True)
class _Call:
    """One step request about to run, for one iteration."""

    step: EnsembleStep
    iteration: int
    inputs: list[tuple[str, str, Tensor]]  # (model input, ensemble tensor, value)
    parameters: dict[str, Any]
    sequence: dict[str, Any]
    decoupled: bool = False
    batch: int = 0
    trace: RequestTrace | None = None
    #: counted in :attr:`EnsembleRun.inflight` (queued or sent, final response not yet in)
    open: bool = True


class EnsembleRun:
    """The state of one ensemble request. ``await run()`` returns the responses (each a
    :class:`BackendResponse`), or sends them through ``request.response_sender`` as they
    form when it is set (a decoupled ensemble) and returns the last one, held back for the
    caller to send with the final flag ([] when the last step ended without a response).

    Raises (from :meth:`run`):
        WorkbenchError: the first failing step's error, prefixed "in ensemble 'E', "
            (:func:`in_ensemble`).
        InvalidArgument: a non-decoupled ensemble got no response at all (Triton's
            "unexpected deadlock, at least one output is not set while no more ensemble
            steps can be made").
    """

    def __init__(self, plan: EnsemblePlan, request: BackendRequest, totals: ComputeTotals,
                 trace: RequestTrace | None = None) -> None:
        self.plan = plan
        self.request = request
        self.totals = totals
        #: the ensemble request's trace when it is sampled (each step request gets a child)
        self.trace = trace
        self.requested = frozenset(request.requested_outputs)
        self.consumers = plan.graph.consumers_for(self.requested)
        #: ensemble tensor -> iteration -> value
        self.values: dict[str, dict[int, _Value]] = {}
        self.counters: dict[str, int] = {}
        #: the batch size each tensor was made with (0: none)
        self.batches: dict[str, int] = {}
        self.responses: list[BackendResponse] = []
        self.queued: list[_Call] = []
        #: step requests queued or sent whose final response is not in yet (Triton's
        #: ``inflight_step_counter_``)
        self.inflight = 0
        self.running: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self.error: BaseException | None = None

    async def run(self) -> list[BackendResponse]:
        """Run the steps as their inputs appear (see the module docstring)."""
        batch = self.request.batch_size if self.plan.batching else 0
        made = []
        for name, wire in self.plan.input_wire.items():
            array = self.request.inputs.get(name)
            tensor = Tensor(name, wire, array) if array is not None else None
            self.batches[name] = batch
            made.append(self._add(name, tensor, {}))  # the request's own: no override
        self._advance([m for m in made if m is not None])
        try:
            await self._drive()
        finally:
            for task in self.running:  # only when this request itself is cancelled
                task.cancel()
        if self.error is not None:
            raise in_ensemble(self.plan.name, self.error) from self.error
        if not self.responses and self.request.response_sender is None:
            raise InvalidArgument(
                f"in ensemble '{self.plan.name}', unexpected deadlock, at least one output is "
                "not set while no more ensemble steps can be made"
            )
        return self.responses

    async def _drive(self) -> None:
        while True:
            if self.queued and self.error is None:
                calls, self.queued = self.queued, []
                if len(calls) == 1 and not self.running and not self.plan.decoupled:
                    await self._step(calls[0])  # a chain: no task needed
                    continue
                for call in calls:
                    task = asyncio.ensure_future(self._step(call))
                    self.running.add(task)
                    task.add_done_callback(self._step_done)
                continue
            if not self.running:
                return
            self.wake.clear()
            await self.wake.wait()

    def _step_done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if task.cancelled() and self.error is None:
            self.error = Cancelled("request cancelled")
        self.wake.set()

    # ----------------------------------------------------------------- tensor values
    def _add(self, name: str, tensor: Tensor | None, sequence: dict[str, Any],
             iteration: int | None = None) -> tuple[str, int] | None:
        """Add a value to ``name``: as ``iteration``, else as its next one; its (tensor,
        iteration), or None when nothing uses it."""
        refs = len(self.consumers.get(name, ())) + (name in self.requested)
        if not refs:
            return None
        if iteration is None:
            iteration = self.counters.get(name, 0)
            self.counters[name] = iteration + 1
        self.values.setdefault(name, {})[iteration] = _Value(tensor, refs, sequence)
        return name, iteration

    def _release(self, name: str, iteration: int) -> None:
        series = self.values[name]
        value = series[iteration]
        value.refs -= 1
        if value.refs <= 0:
            del series[iteration]

    def _has(self, names: Sequence[str], iteration: int) -> bool:
        return all(iteration in self.values.get(n, {}) for n in names)

    def _advance(self, updated: list[tuple[str, int]]) -> None:
        """New values: queue the steps they make ready, answer the iterations complete."""
        if self.error is not None:
            return
        ready: set[tuple[int, int]] = set()
        for name, iteration in updated:
            for index in self.consumers.get(name, ()):
                step = self.plan.graph.steps[index]
                if self._has([t for _, t in step.inputs], iteration):
                    ready.add((index, iteration))
        for index, iteration in sorted(ready, key=lambda r: (r[1], r[0])):
            self.queued.append(self._prepare(self.plan.graph.steps[index], iteration))
            self.inflight += 1
        answered = sorted({i for n, i in updated if n in self.requested})
        for iteration in answered:
            if self._has(sorted(self.requested), iteration):
                self._answer(iteration)
        if self.queued:
            self.wake.set()

    def _prepare(self, step: EnsembleStep, iteration: int) -> _Call:
        """Take a step's inputs for ``iteration`` (Triton's ``InitStep``)."""
        parameters = dict(self.request.parameters)
        sequence: dict[str, Any] = {}
        inputs = []
        for model_input, name in step.inputs:
            value = self.values[name][iteration]
            if value.tensor is not None:
                inputs.append((model_input, name, value.tensor))
            if value.sequence and not sequence:
                sequence = value.sequence
        sequence = sequence or step_sequence(self.request.parameters)
        if sequence != NO_SEQUENCE or any(k in parameters for k in SEQUENCE_KEYS):
            parameters.update(sequence)
        for name in {name for _, name in step.inputs}:
            self._release(name, iteration)
        return _Call(step, iteration, inputs, parameters, sequence)

    def _answer(self, iteration: int) -> None:
        """The ensemble response for ``iteration`` (Triton's ``CheckAndSetEnsembleOutput``)."""
        outputs: dict[str, np.ndarray] = {}
        parameters: dict[str, Any] = {}
        for name in self.request.requested_outputs:
            value = self.values[name][iteration]
            self._release(name, iteration)
            if value.tensor is None:
                log.debug("Composing models did not output tensor %s", name)
                continue
            data = value.tensor.data
            shape = batch_reshaped(self.plan.output_dims.get(name, data.shape),
                                   self.plan.batching, self.batches.get(name, 0), data.shape)
            outputs[name] = data if data.shape == shape else data.reshape(shape)
            if value.sequence and not parameters:
                parameters = dict(value.sequence)
        response = BackendResponse(outputs, parameters=parameters)
        send = self.request.response_sender
        if send is None:
            self.responses.append(response)
            return
        if self.responses:  # a held last response turned out not to be the last
            send(self.responses.pop(), False)
        if self.inflight:
            send(response, False)
        else:  # nothing can follow: the caller sends it with the final flag
            self.responses.append(response)

    # ----------------------------------------------------------------- one step request
    async def _step(self, call: _Call) -> None:
        """Send one step request and take each of its responses as it comes."""
        limiter = self.plan.limiters[call.step.index] if self.plan.limiters else None
        if limiter is not None:
            await limiter.acquire()
        if self.trace is not None:  # a child trace per step request (Triton's parent_id)
            call.trace = self.trace.spawn()
        try:
            stream = self.plan.infer(self._request(call), self.totals, lambda c: self._adapt(call, c))
            async with contextlib.aclosing(stream):
                async for response in stream:
                    self._consume(call, response)
        except Exception as exc:  # noqa: BLE001  # the step's error is the request's
            if self.error is None:
                self.error = exc
        finally:
            self._close(call)
            if limiter is not None:
                limiter.release()

    def _close(self, call: _Call) -> None:
        """``call`` is no longer in flight (its final response came, or it ended)."""
        if call.open:
            call.open = False
            self.inflight -= 1

    def _request(self, call: _Call) -> InferenceRequest:
        step = call.step
        return InferenceRequest(
            step.model_name, [], model_version=step.model_version,
            id=self.request.request_id, parameters=dict(call.parameters), trace=call.trace,
        )

    def _adapt(self, call: _Call, config: ModelConfig) -> InferenceRequest:
        """The step request for the composing model version about to run it: each input's
        batch dimension fitted to that config."""
        step = call.step
        batching = config.max_batch_size > 0
        call.decoupled = config.model_transaction_policy.decoupled
        dims = {io.name: tuple(io.dims) for io in config.input}
        inputs = []
        for model_input, name, tensor in call.inputs:
            data = tensor.data
            if model_input in dims:
                shape = batch_reshaped(dims[model_input], batching, self.batches.get(name, 0), data.shape)
                data = data if data.shape == shape else data.reshape(shape)
            inputs.append(Tensor(model_input, tensor.datatype, data))
        first = inputs[0].data if inputs else None
        call.batch = int(first.shape[0]) if batching and first is not None and first.ndim else 0
        for _, name in step.outputs:  # Triton records it at InitStep
            self.batches[name] = call.batch
        return InferenceRequest(
            step.model_name, inputs, model_version=step.model_version,
            outputs=[RequestedOutput(model_output) for model_output, _ in step.outputs],
            id=self.request.request_id, parameters=dict(call.parameters), trace=call.trace,
        )

    def _consume(self, call: _Call, response: InferenceResponse) -> None:
        """One response of a step: its outputs become the next values of the ensemble
        tensors it maps to (placeholders for those it lacks). A decoupled model's final
        response without outputs only closes its request (Triton's flag-only response)."""
        if response.final or not call.decoupled:  # before its outputs count (Triton's order)
            self._close(call)
        if self.error is not None or (call.decoupled and response.final and not response.outputs):
            return
        answered = {tensor.name: tensor for tensor in response.outputs}
        if any(k in response.parameters for k in SEQUENCE_KEYS):  # Triton's parameter_override
            sequence = step_sequence({"sequence_id": call.sequence["sequence_id"], **response.parameters})
        else:
            sequence = call.sequence
        # a non-decoupled step answers once: its outputs keep the iteration of its inputs, so
        # values of one origin pair up even when steps finish out of order
        iteration = None if call.decoupled else call.iteration
        made = []
        for model_output, name in call.step.outputs:
            tensor = answered.get(model_output)
            value = Tensor(name, tensor.datatype, tensor.data) if tensor is not None else None
            made.append(self._add(name, value, sequence, iteration))
        self._advance([m for m in made if m is not None])


def in_ensemble(ensemble: str, error: BaseException) -> WorkbenchError:
    """A failed step's ``error`` as the ensemble request's: the same class and status code,
    its message prefixed "in ensemble 'E', " (Triton's ``EnsembleContext::FinishEnsemble``
    adds the prefix to every error that ends an ensemble request). An error outside the
    engine's hierarchy becomes an :class:`InternalError` with the prefixed text."""
    message = f"in ensemble '{ensemble}', {error}"
    if not isinstance(error, WorkbenchError):
        return InternalError(message)
    prefixed = copy.copy(error)
    prefixed.message = message
    prefixed.args = (message,)
    return prefixed


__all__ = ["SEQUENCE_KEYS", "EnsemblePlan", "EnsembleRun", "in_ensemble"]
