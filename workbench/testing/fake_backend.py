"""A backend for tests that need to control execution (block, count, fail).

It implements the real :class:`~workbench.backends.base.Backend` interface, so the
engine and schedulers run unchanged around it: the fake sits only at the backend
boundary. Model configs select it with ``backend: "fake"``; its one input
``INPUT0`` is copied to ``OUTPUT0``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.common.errors import InvalidArgument
from workbench.messages.types import InferenceRequest, Tensor


class FakeBehaviour:
    """Shared knobs: ``gate`` blocks executions until set; ``barrier`` makes executions
    meet (proving they run in parallel); ``executions`` counts executions per instance;
    ``batches`` records each execution's first input values; an execution holding a
    value in ``slow_values`` takes ``slow_s`` seconds longer; an execution holding a value in
    ``held_values`` waits until ``release`` is set (after ``gate``); a request whose first value
    is in ``error_values`` gets an error response ("fake error for value <v>"). ``load_gate``
    blocks instance loads (on the model-load threads) until set; ``loading`` is set when a
    load waits on it (a slow model load, without timing). ``active`` counts the executions
    running now and ``max_active`` the most seen at once since the last :meth:`reset`.
    ``initialized`` / ``finalized`` count instance loads and unloads per instance name (a
    backend's instance initialize / finalize, which Triton's instance-update tests count); a
    load whose version folder is named in ``fail_versions`` raises, and so does the load of an
    instance named in ``fail_instances`` (after the barrier), and the next ``fail_loads`` instance
loads raise (a load that fails a few times, then works); ``loads`` counts the attempts; ``load_barrier`` makes instance
    loads meet (proving they run concurrently). Per version (the version folder's name, for
    tests of two versions side by side): executions of a version in ``held_versions`` wait
    until ``release`` is set, and every request of a version in ``error_versions`` gets an
    error response ("fake error of version <v>").

    Tests order events on the executions, not on sleeps: ``await BEHAVIOUR.executing(n)``
    returns once ``n`` executions have started (entered ``execute``, before any gate) since
    the last :meth:`reset`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.release = threading.Event()
        self.load_gate = threading.Event()
        self.loading = threading.Event()
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)
        self.reset()

    def reset(self) -> None:
        self.gate.set()
        self.release.set()
        self.load_gate.set()
        self.loading.clear()
        self.barrier: threading.Barrier | None = None
        self.executions: dict[str, int] = {}
        self.batches: list[list[float]] = []
        self.slow_values: set[float] = set()
        self.slow_s = 0.3
        self.held_values: set[float] = set()
        self.error_values: set[float] = set()
        self.active = 0
        self.max_active = 0
        self.initialized: dict[str, int] = {}
        self.finalized: dict[str, int] = {}
        self.fail_versions: set[str] = set()
        self.fail_instances: set[str] = set()
        self.fail_loads = 0
        self.loads = 0
        self.load_barrier: threading.Barrier | None = None
        self.held_versions: set[str] = set()
        self.error_versions: set[str] = set()

    def wait_started(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """Block until ``count`` executions have started since :meth:`reset` (any instance).

        Raises:
            TimeoutError: fewer had started after ``timeout_s`` seconds.
        """
        with self.started:
            if not self.started.wait_for(lambda: len(self.batches) >= count, timeout_s):
                raise TimeoutError(f"{len(self.batches)} of {count} fake executions started in {timeout_s} s")

    async def executing(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """:meth:`wait_started` for a test on the event loop (waits on a worker thread, so the
        engine's loop keeps running)."""
        await asyncio.to_thread(self.wait_started, count, timeout_s)


BEHAVIOUR = FakeBehaviour()


class FakeInstance(ModelInstance):
    _finalized = False
    #: the version folder's name this instance serves
    version = ""

    def unload(self) -> None:
        with BEHAVIOUR.lock:
            if not self._finalized:
                self._finalized = True
                BEHAVIOUR.finalized[self.name] = BEHAVIOUR.finalized.get(self.name, 0) + 1

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        values = [float(r.inputs["INPUT0"].ravel()[0]) for r in requests]
        with BEHAVIOUR.lock:
            BEHAVIOUR.executions[self.name] = BEHAVIOUR.executions.get(self.name, 0) + 1
            BEHAVIOUR.batches.append(values)
            BEHAVIOUR.active += 1
            BEHAVIOUR.max_active = max(BEHAVIOUR.max_active, BEHAVIOUR.active)
            BEHAVIOUR.started.notify_all()
        try:
            return self._run(requests, values, times)
        finally:
            with BEHAVIOUR.lock:
                BEHAVIOUR.active -= 1

    def _run(self, requests: Sequence[BackendRequest], values: list[float],
             times: ExecutionTimes) -> list[BackendResponse]:
        if BEHAVIOUR.barrier is not None:
            BEHAVIOUR.barrier.wait()
        BEHAVIOUR.gate.wait()
        if BEHAVIOUR.held_values.intersection(values) or self.version in BEHAVIOUR.held_versions:
            BEHAVIOUR.release.wait()
        if BEHAVIOUR.slow_values.intersection(values):
            time.sleep(BEHAVIOUR.slow_s)
        times.mark_input_done()
        times.mark_infer_done()
        if self.version in BEHAVIOUR.error_versions:
            return [BackendResponse(error=InvalidArgument(f"fake error of version {self.version}"))
                    for _ in requests]
        return [
            BackendResponse(error=InvalidArgument(f"fake error for value {v:g}"))
            if v in BEHAVIOUR.error_values else BackendResponse({"OUTPUT0": r.inputs["INPUT0"]})
            for r, v in zip(requests, values, strict=True)
        ]


class FakeBackend(Backend):
    names = ("fake",)

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        if not BEHAVIOUR.load_gate.is_set():
            BEHAVIOUR.loading.set()
            BEHAVIOUR.load_gate.wait()
        with BEHAVIOUR.lock:
            BEHAVIOUR.loads += 1
            failing, BEHAVIOUR.fail_loads = BEHAVIOUR.fail_loads > 0, max(0, BEHAVIOUR.fail_loads - 1)
        if failing:
            raise InvalidArgument(f"fake load failure {BEHAVIOUR.loads}")
        if version_dir.name in BEHAVIOUR.fail_versions:
            raise InvalidArgument(f"fake load failure of version {version_dir.name}")
        if BEHAVIOUR.load_barrier is not None:
            BEHAVIOUR.load_barrier.wait()
        if spec.name in BEHAVIOUR.fail_instances:
            raise InvalidArgument(f"fake load failure of instance {spec.name}")
        with BEHAVIOUR.lock:
            BEHAVIOUR.initialized[spec.name] = BEHAVIOUR.initialized.get(spec.name, 0) + 1
        instance = FakeInstance(spec)
        instance.version = version_dir.name
        return instance


FAKE_CONFIG = """
name: "{name}"
backend: "fake"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU {group} }} ]
"""


def write_fake_model(repo: Path, name: str, count: int = 2, extra: str = "", group: str = "") -> Path:
    """A model folder served by :class:`FakeBackend` (an empty version folder 1);
    ``extra`` is appended to the config (e.g. a ``dynamic_batching`` block) and ``group``
    to its instance group (e.g. a ``rate_limiter`` block)."""
    return write_backend_model(repo, name, FAKE_CONFIG.format(name=name, count=count, group=group) + extra)


def write_backend_model(repo: Path, name: str, config: str) -> Path:
    """``repo/name`` with ``config.pbtxt`` = ``config`` and an empty version folder 1: what
    a test backend that needs no model file (``fake``, ``seqprobe``) loads."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    return folder


def fake_request(name: str, value: float = 1.0, version: str = "") -> InferenceRequest:
    """A one-row request to a :func:`write_fake_model` model: ``INPUT0`` FP32 ``[[value]]``
    (the fake backend answers ``OUTPUT0`` = ``INPUT0``)."""
    return InferenceRequest(name, [Tensor("INPUT0", "FP32", np.array([[value]], np.float32))],
                            model_version=version)
