"""Triton's ensemble scheduler: an ensemble request runs as a DAG of composing-model requests.

An ensemble (``platform: "ensemble"``, ``ensemble_scheduling { step [...] }``) has no backend
and no instances: one request becomes one request per step, each sent through the engine to
the composing model (``step_infer``, handed over by the engine; scheduling never imports it),
so composing models validate, queue, batch and count statistics as for a client's request.
Follows core ``ensemble_scheduler.cc`` (``EnsembleContext``); the data flow of one request
(iterations, placeholders, sequence parameters, ``max_inflight_requests``, the final flag,
errors prefixed "in ensemble 'E', ") is :mod:`workbench.scheduling.ensemble_run`.

Here: step requests carry the ensemble request's id and parameters; ``model_version: -1``
resolves the latest READY version per request; tensors move between steps as the numpy
arrays the models returned (no copy), a step asking only for its ``output_map``'s outputs;
the batch dimension is converted per step (``EnsembleContext::ReshapeTensorDims``: a tensor
remembers the batch size it was made with, gets a batch of 1 prepended for a batching model
whose dims then match, loses a batch of 1 for a non-batching one); only the requested
outputs are returned. Statistics (Triton's ``RequestTracker``): per request one ``success``
or one failure (reason ``OTHER``), ``queue`` from enqueue to the first step, compute
durations the sums of the steps' (ns), ``inference_count`` += batch size,
``execution_count`` += 1. User view: docs/ensembles.md."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.common.datatypes import config_to_wire
from workbench.common.errors import InternalError, Unavailable
from workbench.scheduling.base import Scheduler
from workbench.scheduling.ensemble_run import EnsemblePlan, EnsembleRun
from workbench.scheduling.ensemble_steps import (
    EnsembleGraph,
    EnsembleStep,
    StepAdapt,
    StepInfer,
    batch_reshaped,
    ensemble_steps,
)
from workbench.stats.statistics import ComputeTotals, ModelStatistics

if TYPE_CHECKING:
    from workbench.tracing.records import RequestTrace

log = logging.getLogger(__name__)


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
        graph = EnsembleGraph(config)
        self.steps = graph.steps
        self._batching = config.max_batch_size > 0
        limit = config.ensemble_scheduling.max_inflight_requests
        if limit > 0:  # Triton's load-time line (L0_simple_ensemble greps the server log for it)
            log.info("Ensemble model '%s' configured with max_inflight_requests: %d", config.name, limit)
        self._plan = EnsemblePlan(
            name=config.name,
            graph=graph,
            batching=self._batching,
            input_wire={io.name: config_to_wire(io.data_type) for io in config.input},
            output_dims={
                io.name: tuple(io.reshape.shape if io.HasField("reshape") else io.dims)
                for io in config.output
            },
            infer=step_infer,
            limiters=[asyncio.Semaphore(limit) for _ in graph.steps] if limit > 0 else [],
            decoupled=config.model_transaction_policy.decoupled,
        )
        self._stats = statistics
        self._inflight = 0
        self._stopping = False
        self._drained: asyncio.Event | None = None

    async def enqueue(self, request: BackendRequest, arrival_ns: int, *,
                      compute_totals: ComputeTotals | None = None,
                      trace: RequestTrace | None = None) -> BackendResponse:
        """Run the steps of ``request`` and answer with the requested ensemble outputs.

        ``request.inputs`` are the ensemble inputs (numpy, batch dim first when the
        ensemble batches). Without ``request.response_sender`` the one response comes back
        (outputs a composing model did not return left out); with it (a decoupled ensemble)
        every response is sent through it as it forms, the last one (formed when no step
        request is left in flight) with the final flag, else ``(None, True)`` after the
        others, and that last response (or an empty one) is returned.

        Raises:
            Unavailable: the ensemble is being unloaded.
            WorkbenchError: the first failing step's error prefixed "in ensemble 'E', "
                (e.g. ``ModelNotFound`` "in ensemble 'E', Request for unknown model: 'm' has
                no available versions" when a composing model was unloaded, or the composing
                model's validation or backend error).
            InvalidArgument: a non-decoupled ensemble request got no response (Triton's
                "unexpected deadlock" text).
            InternalError: a non-decoupled ensemble request got more than one response (a
                composing model that became decoupled after the ensemble loaded).
        """
        if self._stopping:
            raise Unavailable("model is being unloaded; request rejected")
        enqueue_ns = time.monotonic_ns()
        self._inflight += 1
        totals = ComputeTotals()
        compute_start_ns = time.monotonic_ns()
        try:
            responses = await EnsembleRun(self._plan, request, totals, trace).run()
            if request.response_sender is None and len(responses) != 1:
                raise InternalError(
                    f"in ensemble '{self.name}', {len(responses)} responses for a request to "
                    "an ensemble that is not decoupled"
                )
        except BaseException:
            self._stats.record_failure(time.monotonic_ns() - arrival_ns, "OTHER")
            if trace is not None:
                _trace_ensemble(trace, enqueue_ns, None)
            raise
        finally:
            self._forget()
        response = responses[0] if responses else BackendResponse()
        if trace is not None:  # a sampled request: its steps have child traces
            _trace_ensemble(trace, enqueue_ns, response.outputs)
        self._stats.record_success(
            time.monotonic_ns() - arrival_ns,
            compute_start_ns - enqueue_ns,
            totals.input_ns,
            totals.infer_ns,
            totals.output_ns,
        )
        batch = request.batch_size if self._batching else 1
        self._stats.record_execution(batch, totals.input_ns, totals.infer_ns, totals.output_ns)
        if compute_totals is not None:  # this ensemble is a step of another one
            compute_totals.add(totals.input_ns, totals.infer_ns, totals.output_ns)
        if request.response_sender is not None:
            request.response_sender(responses[0] if responses else None, True)
        return response

    def inflight_count(self) -> int:
        return self._inflight

    async def stop(self) -> None:
        """Refuse new requests and wait for the in-flight ones (their steps still run)."""
        self._stopping = True
        if self._inflight:
            self._drained = asyncio.Event()
            await self._drained.wait()

    def _forget(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()


def _trace_ensemble(trace: RequestTrace, enqueue_ns: int, outputs: dict[str, np.ndarray] | None) -> None:
    """A traced ensemble request is done: ``QUEUE_START``, its outputs (on success) and
    ``REQUEST_END``; the steps reported their own timestamps in their child traces."""
    trace.stamp("QUEUE_START", enqueue_ns)
    if outputs is not None:
        trace.report_tensors("TENSOR_BACKEND_OUTPUT", outputs)
    trace.stamp("REQUEST_END", time.monotonic_ns())


__all__ = [
    "EnsembleScheduler", "EnsembleStep", "StepAdapt", "StepInfer", "batch_reshaped",
    "ensemble_steps",
]
