"""The system and CUDA shared-memory RPCs of ``inference.GRPCInferenceService``.

Each RPC is one call to the engine's shared-memory API (``Server.shared_memory``:
``register_system_shared_memory`` and friends) with Triton's message shapes
(``grpc_server.cc``): status responses map region name -> ``RegionStatus``; register and
unregister answer empty messages; an empty ``name`` unregisters every region of the kind.
With ``--allow-client-shm`` off, register and unregister answer UNIMPLEMENTED ("Client
shared memory is disabled. ...", Triton's UNSUPPORTED) and status still works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from workbench import Server
from workbench.common.results import CudaSharedMemoryStatus, SystemSharedMemoryStatus
from workbench.frontends.grpc.rpc import Context, rpc


class SharedMemoryServicer:
    """Mixin for the servicer: the six shared-memory RPCs over ``self.server``."""

    server: Server

    @rpc
    async def SystemSharedMemoryStatus(self, request: pb.SystemSharedMemoryStatusRequest, context: Context):
        """``regions``: name -> ``{name, key, offset, byte_size}`` (bytes) for every system
        region, or just ``request.name``; an unknown name is NOT_FOUND ("Unable to find
        system shared memory region: 'r'")."""
        rows = await self.server.shared_memory.system_shared_memory_status(request.name)
        return _status_response(pb.SystemSharedMemoryStatusResponse, rows)

    @rpc
    async def SystemSharedMemoryRegister(self, request: pb.SystemSharedMemoryRegisterRequest, context: Context):
        """Register ``byte_size`` bytes at ``offset`` of the POSIX shm object ``key`` as
        ``name``. Errors: ALREADY_EXISTS, INTERNAL (cannot open the key), INVALID_ARGUMENT
        (offset + byte_size past the object's end), UNIMPLEMENTED (client shm disabled)."""
        await self.server.shared_memory.register_system_shared_memory(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @rpc
    async def SystemSharedMemoryUnregister(self, request: pb.SystemSharedMemoryUnregisterRequest,
                                           context: Context):
        """Unregister system region ``name`` (unknown names are ignored), or all with ``""``."""
        await self.server.shared_memory.unregister_system_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @rpc
    async def CudaSharedMemoryStatus(self, request: pb.CudaSharedMemoryStatusRequest, context: Context):
        """``regions``: name -> ``{name, device_id, byte_size}`` for every CUDA region, or
        just ``request.name`` (unknown: NOT_FOUND)."""
        rows = await self.server.shared_memory.cuda_shared_memory_status(request.name)
        return _status_response(pb.CudaSharedMemoryStatusResponse, rows)

    @rpc
    async def CudaSharedMemoryRegister(self, request: pb.CudaSharedMemoryRegisterRequest, context: Context):
        """Register the CUDA allocation behind ``raw_handle`` (the 64 raw bytes of a
        ``cudaIpcMemHandle_t``) on ``device_id``. Without a GPU: INVALID_ARGUMENT "failed to
        register CUDA shared memory region: 'r', GPUs not supported"."""
        await self.server.shared_memory.register_cuda_shared_memory(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @rpc
    async def CudaSharedMemoryUnregister(self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context):
        """Unregister CUDA region ``name``, or all with ``""``."""
        await self.server.shared_memory.unregister_cuda_shared_memory(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()


def _status_response(message_type: Any,
                     rows: Sequence[SystemSharedMemoryStatus] | Sequence[CudaSharedMemoryStatus]) -> Any:
    """A ``*SharedMemoryStatusResponse`` whose ``regions`` map each row's name to its
    ``RegionStatus`` (the row's keys are the message's fields)."""
    response = message_type()
    for row in rows:
        response.regions[row["name"]].CopyFrom(message_type.RegionStatus(**row))
    return response
