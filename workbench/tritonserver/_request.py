"""Triton's ``InferenceRequest`` (the dataclass ``model.infer`` / ``model.async_infer`` take)
and its translation into the engine's :class:`workbench.InferenceRequest`."""

from __future__ import annotations

import asyncio
import enum
import queue
from dataclasses import dataclass, field
from typing import Any

import workbench
from workbench.tritonserver._errors import InvalidArgumentError
from workbench.tritonserver._refs import ModelRef
from workbench.tritonserver._tensor import DeviceOrMemoryType, Tensor, host_memory_type


class RequestFlag(enum.IntFlag):
    """``TRITONSERVER_RequestFlag``: a sequence's first and last request."""

    SEQUENCE_START = 1
    SEQUENCE_END = 2


@dataclass
class InferenceRequest:
    """An inference request (Triton's): inputs by name (a :class:`Tensor`, numpy array, list
    or host DLPack producer), ``parameters`` (str, int, float, bool), ``priority``,
    ``timeout`` (microseconds, 0 = none), sequence ``correlation_id`` and ``flags``
    (:class:`RequestFlag`), ``output_memory_type`` (host only) and an optional
    ``response_queue`` (``queue.SimpleQueue`` for ``infer``, ``asyncio.Queue`` for
    ``async_infer``) that receives every response too."""

    model: ModelRef
    request_id: str | None = None
    flags: int = 0
    correlation_id: int | str | None = None
    priority: int = 0
    timeout: int = 0
    inputs: dict[str, Tensor | Any] = field(default_factory=dict)
    parameters: dict[str, str | int | bool | float] = field(default_factory=dict)
    output_memory_type: DeviceOrMemoryType | None = None
    response_queue: queue.SimpleQueue | asyncio.Queue | None = None

    def engine_request(self, cancel: workbench.CancelSignal) -> workbench.InferenceRequest:
        """The engine's request (inputs converted; a BYTES input's elements as ``bytes``).

        Raises:
            InvalidArgumentError: an input that cannot be converted, a parameter of another
                type, a non-string request id.
            UnsupportedError: a GPU ``output_memory_type``.
        """
        if self.output_memory_type is not None:
            host_memory_type(self.output_memory_type)
        tensors = []
        for name, value in self.inputs.items():
            tensor = Tensor.from_object(value)
            tensors.append(workbench.Tensor(name, tensor.data_type.wire, tensor.engine_data()))
        parameters: dict[str, Any] = {}
        for key, value in self.parameters.items():
            if not isinstance(value, (str, int, float, bool)):
                raise InvalidArgumentError(f"Value type {type(value)} for Request Parameter '{key}' "
                                           "is not supported")
            parameters[key] = value
        if self.priority:
            parameters["priority"] = self.priority
        if self.timeout:
            parameters["timeout"] = self.timeout
        if self.correlation_id is not None:
            parameters["sequence_id"] = self.correlation_id
            parameters["sequence_start"] = bool(self.flags & RequestFlag.SEQUENCE_START)
            parameters["sequence_end"] = bool(self.flags & RequestFlag.SEQUENCE_END)
        version = "" if self.model.version < 0 else str(self.model.version)
        return workbench.InferenceRequest(self.model.name, tensors, model_version=version,
                                          id=self.request_id or "", parameters=parameters, cancel=cancel)


__all__ = ["InferenceRequest", "RequestFlag"]
