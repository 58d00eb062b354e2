"""The one interface every backend implements (Triton's backend API, in Python).

A backend turns ``(model config, version folder, instance spec)`` into a
:class:`ModelInstance`. An instance executes a *batch* of requests in one call
and returns one :class:`BackendResponse` per request, in order. Instances are
driven from one dedicated thread each (never from the event loop), so
``execute`` may block. A backend never sees HTTP, gRPC, JSON or queues.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import WorkbenchError
from workbench.messages.types import CancelSignal, InferenceRequest, InferenceResponse
from workbench.stats.custom_metrics import CustomMetrics
from workbench.stats.statistics import MemoryUsage


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Where and as what one model instance runs.

    Attributes:
        name: Triton-style instance name, ``<group name>_<index>`` (e.g. ``digits_mlp_0_0``).
        group_name: the instance group's name.
        kind: ``"KIND_CPU"``, ``"KIND_GPU"`` or ``"KIND_MODEL"``.
        device_id: GPU index for KIND_GPU, 0 otherwise.
        resources: the group's ``rate_limiter`` resources as (name, global, count).
        rate_priority: the group's ``rate_limiter.priority`` (lower = scheduled first).
        signature: what an instance update compares (Triton's instance signature: the
            group's settings but its name and count, and the device); instances with equal
            signatures are interchangeable, so a count change keeps the serving ones.
    """

    name: str
    group_name: str
    kind: str
    device_id: int = 0
    resources: tuple[tuple[str, bool, int], ...] = ()
    rate_priority: int = 0
    signature: bytes = b""


@dataclass(slots=True, eq=False)
class BackendRequest:
    """One request as a backend sees it (compared by identity: its inputs are numpy arrays).

    Attributes:
        inputs: input name -> numpy array. With ``max_batch_size > 0`` every array has
            the batch dimension first; BYTES inputs are object arrays of ``bytes``.
        requested_outputs: names of the outputs to return (all model outputs when the
            client asked for none).
        parameters: the request's parameters (custom keys included).
        response_sender: set for decoupled models only (``model_transaction_policy {
            decoupled: true }``): ``response_sender(response, final)`` delivers one response
            (or ``None`` with ``final=True``: no more responses) from any thread, during or
            after ``execute``. The request is complete once a call passes ``final=True``.
            Triton's ``TRITONBACKEND_ResponseFactory``.
        request_id: the client's request id (``""`` if none); Triton's ``TRITONBACKEND_RequestId``.
        batched: False for a model with ``max_batch_size: 0``: its inputs have no batch
            dimension and the request counts as batch size 1 (Triton's statistics).
        cancel: cancelled by the engine when the client stopped waiting (its stream or
            connection closed) or cancelled the request; a backend that can stop work early
            registers ``cancel.on_cancel`` (Triton's ``TRITONBACKEND_RequestIsCancelled``).
    """

    inputs: dict[str, np.ndarray]
    requested_outputs: Sequence[str]
    parameters: dict[str, Any] = field(default_factory=dict)
    response_sender: Callable[[BackendResponse | None, bool], None] | None = None
    request_id: str = ""
    batched: bool = True
    cancel: CancelSignal = field(default_factory=CancelSignal)

    @property
    def batch_size(self) -> int:
        """Leading dimension of the first input (1 when the model does not batch)."""
        if not self.batched:
            return 1
        for array in self.inputs.values():
            return int(array.shape[0]) if array.ndim else 1
        return 1


@dataclass(slots=True)
class BackendResponse:
    """Outputs of one request (name -> numpy array), or the error that request hit.

    ``parameters``: response parameters for the client (str / int / bool values; Triton's
    ``TRITONBACKEND_ResponseSet*Parameter``).

    ``rescheduled``: the backend released the request with Triton's
    ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` instead of answering it: the request goes back
    to its scheduler and runs again (a sequence batcher with ``iterative_sequence: true``);
    any other scheduler fails it with Triton's text. No outputs then.
    """

    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: WorkbenchError | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    rescheduled: bool = False


@dataclass(slots=True)
class ExecutionTimes:
    """Monotonic timestamps (``time.monotonic_ns``) of one execution's phases.

    ``compute_input`` = start .. input_done, ``compute_infer`` = input_done ..
    infer_done, ``compute_output`` = infer_done .. end (Triton's statistics split).
    """

    start_ns: int = 0
    input_done_ns: int = 0
    infer_done_ns: int = 0
    end_ns: int = 0

    def mark_input_done(self) -> None:
        self.input_done_ns = time.monotonic_ns()

    def mark_infer_done(self) -> None:
        self.infer_done_ns = time.monotonic_ns()


class ModelInstance(ABC):
    """One loaded copy of a model; owned and driven by exactly one scheduler thread."""

    def __init__(self, spec: InstanceSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    @abstractmethod
    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        """Run one execution over ``requests`` (a batch of 1..max_batch_size requests).

        Returns exactly one response per request, in order. An error that concerns one
        request goes into that response; an exception fails the whole batch. Must call
        ``times.mark_input_done()`` and ``times.mark_infer_done()`` at the phase ends.
        """

    def unload(self) -> None:  # noqa: B027  # a default on purpose: an instance may hold nothing to release
        """Release the instance's resources (sessions, device memory). Idempotent. Default:
        nothing to release."""

    #: whether :meth:`ready` asks something (the server then calls it off the event loop)
    checks_readiness = False

    def ready(self) -> bool:
        """Whether this instance can serve now (Triton's ``TRITONBACKEND_ModelInstanceReady``):
        a READY model version with an instance that is not ready reports NOT READY to
        ``/v2/models/<m>/ready``. May block (when :attr:`checks_readiness`). Default: True."""
        return True

    def reported_memory(self) -> list[MemoryUsage]:
        """Memory the backend knows this instance holds, per (kind, device), in bytes
        (e.g. GPU bytes from the framework; Triton's ``TRITONBACKEND_ModelInstanceReportMemoryUsage``).

        Called once, right after the instance loaded. The loader measures on its own the host
        RSS growth (``CPU``) and, for KIND_GPU / KIND_MODEL instances, the NVML growth per
        device (``GPU``); an entry returned here replaces the measured one of the same
        (kind, id) instead of adding to it. Report only what this instance holds itself (an
        instance sharing another one's weights reports 0 for them). Default: none.
        """
        return []


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What the engine lends to backends that call back into the server (Python backend BLS).

    Attributes:
        loop: the engine's event loop; ``infer_stream`` must run on it (use
            ``asyncio.run_coroutine_threadsafe`` from instance threads).
        infer_stream: ``infer_stream(request)`` -> async generator of the request's responses
            (exactly one for a non-decoupled model, 0..n for a decoupled one; ``aclose()`` it
            when stopping early, e.g. with ``contextlib.aclosing``); raises
            :class:`WorkbenchError` with Triton's texts (unknown model, bad input, ...).
            The same path as a client's request: validation, batching and statistics apply.
        custom_metrics: the server's custom metric families (Python models'
            ``pb_utils.MetricFamily``, scraped on ``/metrics``); None: each instance keeps
            its own, unscraped.
        load_model: ``await load_model(name, config, files)``, the server's explicit-mode
            load (``config``: a JSON model config or None; ``files``: path in the model
            folder -> bytes, or None); raises :class:`WorkbenchError` with Triton's texts.
            None: a context without model control (every call then fails).
        unload_model: ``await unload_model(name, unload_dependents)``, the explicit-mode
            unload.
        model_ready: ``await model_ready(name, version)`` -> bool (version "": any), never
            an error (Triton's ``ModelIsReady``).
    """

    loop: asyncio.AbstractEventLoop
    infer_stream: Callable[[InferenceRequest], AsyncGenerator[InferenceResponse, None]]
    custom_metrics: CustomMetrics | None = None
    load_model: Callable[[str, str | None, dict[str, bytes] | None], Awaitable[None]] | None = None
    unload_model: Callable[[str, bool], Awaitable[None]] | None = None
    model_ready: Callable[[str, str], Awaitable[bool]] | None = None


class Backend(ABC):
    """Factory for model instances of one backend (``backend: "onnxruntime"`` ...).

    ``context`` is set by the engine before ``load_instance`` (None outside a server).
    The backend's name, platforms, model file names and auto-complete are its row in the
    backend table (:mod:`workbench.config.backend_specs`), which names this class; a new
    backend is a subclass and one row.
    """

    context: BackendContext | None = None
    #: default model file name in a version folder (``default_model_filename``): set by the
    #: registry from the backend's row ("" for a backend without one)
    default_model_filename: str = ""

    #: modules the instances import (the framework): the loader imports them before it
    #: measures a first instance's memory, so the import is not counted as the model's
    framework_modules: tuple[str, ...] = ()
    #: the instances of one model version load on parallel threads (Triton's
    #: ``TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading``); False: one by one
    parallel_instance_loading: bool = True

    @abstractmethod
    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        """Create one instance of the model in ``version_dir`` (blocking; runs off the loop).

        Raises:
            ModelLoadError: the model file is missing or broken, its inputs/outputs disagree
                with ``config``, or the requested device is not available.
        """
