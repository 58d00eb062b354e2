"""Tensors in shared memory for one request: inputs read from, outputs written into regions.

An input tensor or requested output names a region with the parameters of Triton's
shared-memory extension: ``shared_memory_region`` (str), ``shared_memory_offset`` (int,
default 0) and ``shared_memory_byte_size`` (int). :class:`AttachedRequest` resolves them
for the duration of one request: inputs become numpy views over the system region (no
copy; BYTES elements are decoded from their 4-byte length prefixes), every region used is
held until the request ends, and :meth:`AttachedRequest.write_outputs` writes the results
into the output regions.
"""

from __future__ import annotations

import dataclasses

from workbench.engine import cuda_ipc
from workbench.engine.shared_memory import CUDA, Region, SharedMemoryRegistry
from workbench.errors import InternalError, InvalidArgument
from workbench.tensors import tensor_from_buffer, tensor_to_buffer
from workbench.types import InferenceRequest, InferenceResponse, Tensor

SHM_REGION = "shared_memory_region"
SHM_OFFSET = "shared_memory_offset"
SHM_BYTE_SIZE = "shared_memory_byte_size"


def uses_shared_memory(request: InferenceRequest) -> bool:
    """True when an input or a requested output names a shared-memory region."""
    if any(SHM_REGION in tensor.parameters for tensor in request.inputs):
        return True
    return bool(request.outputs) and any(SHM_REGION in o.parameters for o in request.outputs)


def shared_memory_reference(parameters: dict) -> tuple[str, int, int]:
    """``(region, offset, byte_size)`` from tensor parameters (offset and size default 0).

    Raises:
        InvalidArgument: "Unable to parse 'shared_memory_region'" (or offset / byte_size):
            a region that is not a string, an offset or size that is not a non-negative int.
    """
    region = parameters[SHM_REGION]
    if not isinstance(region, str):
        raise InvalidArgument(f"Unable to parse '{SHM_REGION}'")
    values = []
    for key in (SHM_OFFSET, SHM_BYTE_SIZE):
        value = parameters.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"Unable to parse '{key}'")
        values.append(value)
    return region, values[0], values[1]


class AttachedRequest:
    """The regions of one request, held from :meth:`attach` until :meth:`release`.

    Use as a context manager::

        with AttachedRequest(registry, request) as attached:
            response = await model.infer(attached.request, arrival_ns)
            attached.write_outputs(response)

    Attributes:
        request: a copy of the request whose shared-memory inputs hold the region data.
    """

    def __init__(self, registry: SharedMemoryRegistry, request: InferenceRequest) -> None:
        self._registry = registry
        self._held: list[Region] = []
        self._outputs: dict[str, tuple[Region, int, int]] = {}
        self._source = request
        self.request = request

    def __enter__(self) -> AttachedRequest:
        try:
            inputs = [self._input(tensor) for tensor in self._source.inputs]
            for output in self._source.outputs or ():
                if SHM_REGION in output.parameters:
                    self._outputs[output.name] = self._acquire(output.parameters)
        except BaseException:
            self.release()
            raise
        self.request = dataclasses.replace(self._source, inputs=inputs)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _acquire(self, parameters: dict) -> tuple[Region, int, int]:
        name, offset, byte_size = shared_memory_reference(parameters)
        region = self._registry.acquire(name, offset, byte_size)
        self._held.append(region)
        return region, offset, byte_size

    def _input(self, tensor: Tensor) -> Tensor:
        if SHM_REGION not in tensor.parameters:
            return tensor
        region, offset, byte_size = self._acquire(tensor.parameters)
        if region.kind == CUDA:
            buffer = cuda_ipc.read(region.cuda, offset, byte_size)
        else:
            buffer = region.view[offset : offset + byte_size]
        request = self._source
        return tensor_from_buffer(tensor.name, tensor.datatype, tensor.shape, buffer,
                                  model=request.model_name, request_id=request.id)

    def write_outputs(self, response: InferenceResponse) -> None:
        """Write every output that asked for shared memory into its region.

        The response tensor keeps its data (a host array) and its parameters name the
        region; frontends send such outputs without data.

        Raises:
            InternalError: the region is too small (Triton's "shared memory size specified
                with the request for output 'O' (N bytes) should be at least M bytes to hold
                the results").
        """
        for tensor in response.outputs:
            target = self._outputs.get(tensor.name)
            if target is None:
                continue
            region, offset, byte_size = target
            data = tensor_to_buffer(tensor)
            if len(data) > byte_size:
                raise InternalError(
                    f"shared memory size specified with the request for output '{tensor.name}' "
                    f"({byte_size} bytes) should be at least {len(data)} bytes to hold the results"
                )
            if region.kind == CUDA:
                cuda_ipc.write(region.cuda, offset, data)
            else:
                region.view[offset : offset + len(data)] = data

    def release(self) -> None:
        """Give back every region this request holds (idempotent)."""
        held, self._held = self._held, []
        for region in held:
            self._registry.release(region)


__all__ = ["AttachedRequest", "SHM_BYTE_SIZE", "SHM_OFFSET", "SHM_REGION", "shared_memory_reference",
           "uses_shared_memory"]
