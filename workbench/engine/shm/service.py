"""The shared-memory service behind :class:`~workbench.engine.api.server.Server` (Triton's
system and CUDA shared-memory extensions), for every frontend alike.

HTTP maps them to ``/v2/systemsharedmemory[/region/{name}]/status|register|unregister``
and ``/v2/cudasharedmemory/...``; gRPC to ``SystemSharedMemoryStatus/Register/Unregister``
and ``CudaSharedMemoryStatus/Register/Unregister``. Errors are engine errors with Triton's
texts and codes (UNSUPPORTED when ``--allow-client-shm`` is off, ALREADY_EXISTS,
NOT_FOUND, INVALID_ARG); each frontend maps the code as for any other call.
"""

from __future__ import annotations

from workbench.common.results import CudaSharedMemoryStatus, SystemSharedMemoryStatus
from workbench.engine.shm.shared_memory import CUDA, SYSTEM, SharedMemoryRegistry


class SharedMemoryService:
    """The server's shared-memory registry behind async methods.

    Args:
        registry: the regions (the owner closes it on stop). Regions serve inference through
    the ``shared_memory_region`` / ``shared_memory_offset`` / ``shared_memory_byte_size`` parameters of input tensors
    (``Tensor.parameters``; build the tensor with ``workbench.tensor_from_shared_memory``)
    and of requested outputs (``RequestedOutput.parameters``).
    """

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._shared_memory = registry

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        """Register ``byte_size`` bytes from ``offset`` of the POSIX shm object ``key``
        (``shm_open`` name, e.g. ``"/input0"`` = ``/dev/shm/input0``) as region ``name``.

        Raises:
            Unsupported: ``--allow-client-shm`` is off ("Client shared memory is disabled. ...").
            AlreadyExists: "shared memory region 'r' already in manager".
            InvalidArgument: "Unable to open shared memory region: '<key>'" (no such object, or
                not a regular file in ``/dev/shm``: a symlink, a FIFO; INTERNAL in Triton);
                a reserved, empty or malformed key ("... - invalid shm key '<key>'"); byte_size
                0; offset + byte_size past the object's end ("failed to register shared memory
                region 'r': invalid args").
        """
        self._shared_memory.register_system(name, key, offset, byte_size)

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        """Unregister system region ``name``, or all with ``""``; unknown names are ignored.
        A region used by an in-flight request stays mapped until that request ends.

        Raises:
            Unsupported: ``--allow-client-shm`` is off.
        """
        self._shared_memory.unregister(SYSTEM, name)

    async def system_shared_memory_status(self, name: str = "") -> list[SystemSharedMemoryStatus]:
        """``[{"name", "key", "offset", "byte_size"}]`` (bytes) for all system regions, or ``name``.

        Raises:
            NotFound: "Unable to find system shared memory region: 'r'", or ``name`` is a
                CUDA region.
        """
        return self._shared_memory.system_status(name)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register a CUDA allocation exported with ``cudaIpcGetMemHandle`` as region ``name``.

        Args:
            raw_handle: the 64 raw bytes of the ``cudaIpcMemHandle_t`` (HTTP sends them base64
                encoded, gRPC as bytes: decode before calling).
            device_id: the CUDA device the allocation lives on.
            byte_size: bytes of the allocation the region covers.

        Raises:
            Unsupported: ``--allow-client-shm`` is off.
            AlreadyExists: the name is registered.
            InvalidArgument: no GPU or CUDA runtime ("failed to register CUDA shared memory
                region: 'r', GPUs not supported"); a bad handle or a too small allocation.
        """
        self._shared_memory.register_cuda(name, raw_handle, device_id, byte_size)

    async def unregister_cuda_shared_memory(self, name: str = "") -> None:
        """Unregister CUDA region ``name``, or all with ``""`` (as the system variant).

        Raises:
            Unsupported: ``--allow-client-shm`` is off.
        """
        self._shared_memory.unregister(CUDA, name)

    async def cuda_shared_memory_status(self, name: str = "") -> list[CudaSharedMemoryStatus]:
        """``[{"name", "device_id", "byte_size"}]`` (bytes) for all CUDA regions, or ``name``.

        Raises:
            NotFound: "Unable to find cuda shared memory region: 'r'", or ``name`` is a
                system region.
        """
        return self._shared_memory.cuda_status(name)


__all__ = ["SharedMemoryService"]
