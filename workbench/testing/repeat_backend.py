"""A decoupled test backend, after Triton's ``repeat`` test backend (and its
``square`` companion, :class:`SquareBackend`).

Model configs select it with ``backend: "repeat"`` and must be decoupled. Input ``IN``
(INT32 [-1]) asks for one response per element: response ``i`` carries ``OUT`` = ``IN[i]``
and ``IDX`` = ``i`` (both INT32 [1]); a negative element sends an error response instead.
Responses are sent from a separate thread *after* ``execute`` returns (``DELAY_MS``
parameter: milliseconds between responses), then the request is closed with a final flag
and no response: the pattern of a streaming Python model. A fake only at the backend boundary.
"""

from __future__ import annotations

import contextlib
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
from workbench.messages.types import InferenceRequest, InferenceResponse, Tensor
from workbench.testing.fake_backend import write_backend_model

REPEAT_CONFIG = """
name: "{name}"
backend: "repeat"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] }}
]
parameters {{ key: "DELAY_MS" value: {{ string_value: "{delay_ms}" }} }}
"""


class RepeatInstance(ModelInstance):
    def __init__(self, spec: InstanceSpec, delay_s: float) -> None:
        super().__init__(spec)
        self.delay_s = delay_s

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        times.mark_input_done()
        for request in requests:
            values = [int(v) for v in request.inputs["IN"].ravel()]
            threading.Thread(target=self._respond, args=(request, values), daemon=True).start()
        times.mark_infer_done()
        return [BackendResponse() for _ in requests]

    def _respond(self, request: BackendRequest, values: list[int]) -> None:
        send = request.response_sender
        assert send is not None, "the repeat backend serves decoupled models only"
        for index, value in enumerate(values):
            time.sleep(self.delay_s)
            if value < 0:
                send(BackendResponse(error=InvalidArgument(f"negative value {value} at {index}")), False)
                continue
            outputs = {"OUT": np.array([value], np.int32), "IDX": np.array([index], np.int32)}
            send(BackendResponse(outputs), False)
        send(None, True)


class RepeatBackend(Backend):
    names = ("repeat",)

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        delay_ms = float(config.parameters["DELAY_MS"].string_value or 0)
        return RepeatInstance(spec, delay_ms / 1000)


SQUARE_CONFIG = """
name: "{name}"
backend: "square"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


class SquareInstance(ModelInstance):
    """After Triton's ``square_int32`` test model: ``IN`` = [n] asks for n responses, each
    ``OUT`` = [n], sent during ``execute`` (so one instance answers its requests in order),
    then the request is closed with a final flag and no response."""

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        times.mark_input_done()
        for request in requests:
            send = request.response_sender
            assert send is not None, "the square backend serves decoupled models only"
            value = int(request.inputs["IN"].ravel()[0])
            for _ in range(max(value, 0)):
                send(BackendResponse({"OUT": np.array([value], np.int32)}), False)
            send(None, True)
        times.mark_infer_done()
        return [BackendResponse() for _ in requests]


class SquareBackend(Backend):
    names = ("square",)

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        return SquareInstance(spec)


def write_square_model(repo: Path, name: str = "square") -> Path:
    """A decoupled model folder served by :class:`SquareBackend` (one instance)."""
    return write_backend_model(repo, name, SQUARE_CONFIG.format(name=name))


def write_repeat_model(repo: Path, name: str = "repeat", delay_ms: float = 0) -> Path:
    """A decoupled model folder served by :class:`RepeatBackend`."""
    return write_backend_model(repo, name, REPEAT_CONFIG.format(name=name, delay_ms=delay_ms))


def repeat_request(values: list[int], model: str = "repeat", request_id: str = "") -> InferenceRequest:
    """A request for a repeat model (this backend's or the Triton-style Python ``repeat``):
    ``IN`` = ``values`` (INT32), one response per value."""
    return InferenceRequest(model, [Tensor("IN", "INT32", np.array(values, np.int32))], id=request_id)


async def collect_stream(server, request: InferenceRequest) -> list[InferenceResponse]:
    """Every response ``server.infer_stream(request)`` yields (the iterator closed after)."""
    async with contextlib.aclosing(server.infer_stream(request)) as stream:
        return [r async for r in stream]
