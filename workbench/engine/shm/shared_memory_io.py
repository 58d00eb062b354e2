"""Tensors in shared memory for one request: inputs read from, outputs written into regions.

An input tensor or requested output names a region with the parameters of Triton's
shared-memory extension: ``shared_memory_region`` (str), ``shared_memory_offset`` (int,
default 0) and ``shared_memory_byte_size`` (int). :class:`AttachedRequest` resolves them
for the duration of one request: inputs become numpy arrays over the bytes copied out of the
region (system regions through :mod:`workbench.engine.shm.shm_copy`: a region its client
truncated is a clean error, never a fault; BYTES elements are decoded from their
4-byte length prefixes), every region used is held until the request ends, and
:meth:`AttachedRequest.write_outputs` writes the results into the output regions.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from workbench.common.errors import InvalidArgument
from workbench.engine.shm import cuda_ipc
from workbench.engine.shm.shared_memory import CUDA, Region, SharedMemoryRegistry
from workbench.messages.tensors import tensor_from_buffer, tensor_to_buffer
from workbench.messages.types import InferenceRequest, InferenceResponse, Tensor

SHM_REGION = "shared_memory_region"
SHM_OFFSET = "shared_memory_offset"
SHM_BYTE_SIZE = "shared_memory_byte_size"
#: bytes one request copies in (or out) on the event loop; more are copied on a worker thread
OFF_LOOP_BYTES = 1 << 20
T = TypeVar("T")


def uses_shared_memory(request: InferenceRequest) -> bool:
    """True when an input or a requested output names a shared-memory region."""
    for tensor in request.inputs:  # loops, not any(...): no generator per request
        if tensor.parameters and SHM_REGION in tensor.parameters:
            return True
    for output in request.outputs or ():  # noqa: SIM110  # the loop on purpose (above)
        if output.parameters and SHM_REGION in output.parameters:
            return True
    return False


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
    """The regions of one request, held from entering until :meth:`release`.

    Use as an async context manager::

        async with AttachedRequest(registry, request) as attached:
            response = await model.infer(attached.request, arrival_ns)
            await attached.write_outputs(response)

    Region bytes are copied in and out on the calling loop up to :data:`OFF_LOOP_BYTES` per
    request, on a worker thread above that (a 64 MiB input never stalls the event loop; system
    regions only, CUDA copies stay on the loop); a request cancelled meanwhile keeps its
    regions until that copy has finished.

    Attributes:
        request: a copy of the request whose shared-memory inputs hold the region data.
    """

    def __init__(self, registry: SharedMemoryRegistry, request: InferenceRequest) -> None:
        self._registry = registry
        self._held: list[Region] = []
        self._outputs: dict[str, tuple[Region, int, int]] = {}
        self._copying: asyncio.Future | None = None
        self._source = request
        self.request = request

    async def __aenter__(self) -> AttachedRequest:
        try:
            sources = [(tensor, self._acquire(tensor.parameters) if SHM_REGION in tensor.parameters
                        else None) for tensor in self._source.inputs]
            for output in self._source.outputs or ():
                if SHM_REGION in output.parameters:
                    self._outputs[output.name] = self._acquire(output.parameters)
            targets = [target for _, target in sources if target is not None]
            inputs = await self._copy(partial(self._read_inputs, sources), targets)
        except BaseException:
            self.release()
            raise
        self.request = dataclasses.replace(self._source, inputs=inputs)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def _acquire(self, parameters: dict) -> tuple[Region, int, int]:
        name, offset, byte_size = shared_memory_reference(parameters)
        region = self._registry.acquire(name, offset, byte_size)
        self._held.append(region)
        return region, offset, byte_size

    def _read_inputs(self, sources: list[tuple[Tensor, tuple[Region, int, int] | None]]) -> list[Tensor]:
        request = self._source
        inputs = []
        for tensor, target in sources:
            if target is None:
                inputs.append(tensor)
                continue
            region, offset, byte_size = target
            buffer: bytearray | memoryview
            if region.kind == CUDA:
                assert region.cuda is not None  # a CUDA region holds its pointer until closed
                buffer = cuda_ipc.read(region.cuda, offset, byte_size)
            else:
                buffer = region.read(offset, byte_size)
            inputs.append(tensor_from_buffer(tensor.name, tensor.datatype, tensor.shape, buffer,
                                             model=request.model_name, request_id=request.id))
        return inputs

    async def _copy(self, copy: Callable[[], T], targets: list[tuple[Region, int, int]]) -> T:
        """Run ``copy`` (of ``targets``: region, offset, bytes) here, or on a worker thread when
        it moves more than OFF_LOOP_BYTES of system regions only (CUDA copies stay on the
        loop's thread, where they were verified on a GPU)."""
        if any(region.kind == CUDA for region, _, _ in targets) or \
                sum(size for _, _, size in targets) <= OFF_LOOP_BYTES:
            return copy()
        self._copying = asyncio.get_running_loop().run_in_executor(None, copy)
        return await asyncio.shield(self._copying)

    async def write_outputs(self, response: InferenceResponse) -> None:
        """Write every output that asked for shared memory into its region.

        The response tensor keeps its data (a host array) and its parameters name the
        region; frontends send such outputs without data.

        Raises:
            InvalidArgument: the region is too small (Triton's "shared memory size specified
                with the request for output 'O' (N bytes) should be at least M bytes to hold
                the results", INTERNAL in Triton: a client error here), or its client
                truncated it (:meth:`~workbench.engine.shm.shared_memory.Region.write`).
        """
        writes = []
        for tensor in response.outputs:
            target = self._outputs.get(tensor.name)
            if target is None:
                continue
            region, offset, byte_size = target
            data = tensor_to_buffer(tensor)
            if len(data) > byte_size:
                raise InvalidArgument(
                    f"shared memory size specified with the request for output '{tensor.name}' "
                    f"({byte_size} bytes) should be at least {len(data)} bytes to hold the results"
                )
            writes.append((region, offset, data))
        if writes:
            targets = [(region, offset, len(data)) for region, offset, data in writes]
            await self._copy(partial(_write, writes), targets)

    def release(self) -> None:
        """Give back every region this request holds (idempotent); while a copy still runs
        on a worker thread (its request was cancelled), once that copy has finished."""
        if self._copying is not None and not self._copying.done():
            self._copying.add_done_callback(self._copied)
            return
        held, self._held = self._held, []
        for region in held:
            self._registry.release(region)


    def _copied(self, copying: asyncio.Future) -> None:
        if not copying.cancelled():
            copying.exception()  # the request is gone: nobody else reads its error
        self.release()


def _write(writes: list[tuple[Region, int, bytes | memoryview]]) -> None:
    for region, offset, data in writes:
        if region.kind == CUDA:
            assert region.cuda is not None  # a CUDA region holds its pointer until closed
            cuda_ipc.write(region.cuda, offset, data)
        else:
            region.write(offset, data)


__all__ = [
    "OFF_LOOP_BYTES",
    "SHM_BYTE_SIZE",
    "SHM_OFFSET",
    "SHM_REGION",
    "AttachedRequest",
    "shared_memory_reference",
    "uses_shared_memory",
]
