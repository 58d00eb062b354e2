"""A backend for sequence-batcher tests that shows how executions are laid out.

It implements the real :class:`~workbench.backends.base.Backend` interface, so the
engine and the sequence batcher run unchanged around it: the fake sits only at the
backend boundary. Each execution is recorded as the instance that ran it plus one
:class:`Row` per batch row (the READY, START and CORRID control values the batcher
gave that row, and its ``INPUT`` value). ``INPUT`` is copied to ``OUTPUT``; a ready row
whose ``INPUT`` is :data:`FAIL_VALUE` gets an error response, and one whose ``INPUT`` is
:data:`MALFORMED_VALUE` a malformed response (a backend defect the engine must survive). Configs select it with
``backend: "seqprobe"`` (register it with ``register_backend("seqprobe", ProbeBackend)``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.common.errors import InternalError
from workbench.testing.fake_backend import write_backend_model

#: a ready row with this INPUT value fails (its response carries an InternalError)
FAIL_VALUE = -1.0
#: a ready row with this INPUT value gets a response whose outputs are None, not a dict
MALFORMED_VALUE = -2.0


@dataclass(frozen=True, slots=True)
class Row:
    """One batch row as the model saw it: control values and the ``INPUT`` value (FP32)."""

    ready: bool
    start: bool
    corrid: int
    value: float


class SequenceProbe:
    """Shared record and knobs: ``executions`` holds ``(instance name, rows)`` per
    execution in start order; ``unloaded`` the names of the instances unloaded, in order;
    clearing ``gate`` blocks executions until it is set; ``await PROBE.executing(n)``
    returns once ``n`` executions have started (before the gate)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)
        self.reset()

    def reset(self) -> None:
        self.gate.set()
        self.executions: list[tuple[str, list[Row]]] = []
        self.unloaded: list[str] = []

    def wait_started(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """Block until ``count`` executions have started since :meth:`reset`.

        Raises:
            TimeoutError: fewer had started after ``timeout_s`` seconds.
        """
        with self.started:
            if not self.started.wait_for(lambda: len(self.executions) >= count, timeout_s):
                raise TimeoutError(f"{len(self.executions)} of {count} probe executions started in {timeout_s} s")

    async def executing(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """:meth:`wait_started` for a test on the event loop (waits on a worker thread)."""
        await asyncio.to_thread(self.wait_started, count, timeout_s)


PROBE = SequenceProbe()


class ProbeInstance(ModelInstance):
    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        rows = [
            Row(bool(r.inputs["READY"].ravel()[0]), bool(r.inputs["START"].ravel()[0]),
                int(r.inputs["CORRID"].ravel()[0]), float(r.inputs["INPUT"].ravel()[0]))
            for r in requests
        ]
        with PROBE.lock:
            PROBE.executions.append((self.name, rows))
            PROBE.started.notify_all()
        PROBE.gate.wait()
        times.mark_input_done()
        times.mark_infer_done()
        return [_response(request, row) for request, row in zip(requests, rows, strict=True)]

    def unload(self) -> None:
        with PROBE.lock:
            PROBE.unloaded.append(self.name)


def _response(request: BackendRequest, row: Row) -> BackendResponse:
    if row.ready and row.value == FAIL_VALUE:
        return BackendResponse(error=InternalError(f"probe refused sequence {row.corrid}"))
    if row.ready and row.value == MALFORMED_VALUE:
        return BackendResponse(cast(dict, None))
    return BackendResponse({"OUTPUT": request.inputs["INPUT"]})


class ProbeBackend(Backend):
    names = ("seqprobe",)

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        return ProbeInstance(spec)


PROBE_CONFIG = """
name: "{name}"
backend: "seqprobe"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
sequence_batching {{
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
"""


def write_probe_model(repo: Path, name: str = "probe", count: int = 1, max_batch_size: int = 4,
                      strategy: str = "") -> Path:
    """A model folder served by :class:`ProbeBackend` (an empty version folder 1) with
    ``count`` instances; ``strategy`` goes inside ``sequence_batching`` (e.g.
    ``direct { minimum_slot_utilization: 1.0 }``)."""
    config = PROBE_CONFIG.format(name=name, count=count, max_batch_size=max_batch_size,
                                 strategy=strategy)
    return write_backend_model(repo, name, config)


__all__ = ["FAIL_VALUE", "MALFORMED_VALUE", "PROBE", "ProbeBackend", "Row", "write_probe_model"]
