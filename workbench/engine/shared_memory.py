"""The shared-memory registry: client regions registered by name (Triton's SharedMemoryManager).

Two kinds of region share one namespace of names, as in Triton:

- system regions: a POSIX shared-memory object (``shm_open`` key, e.g. ``"/input0"``, which
  is the file ``/dev/shm/input0``) mapped read-write with :mod:`mmap`, from ``offset`` for
  ``byte_size`` bytes. ``multiprocessing.shared_memory`` is deliberately not used: its
  resource tracker would unlink segments that the client created.
- CUDA regions: a ``cudaIpcMemHandle_t`` opened on ``device_id`` (:mod:`cuda_ipc`, loaded
  only when a CUDA region is registered).

Lifetime follows Triton: a request that names a region holds a use of it
(:meth:`SharedMemoryRegistry.acquire` / :meth:`release`); unregistering a region in use
succeeds but only marks it, and the mapping is closed when its last request releases it
(Triton's ``awaiting_unregister_``). Until then it still shows in the status and serves
requests. Every method is thread-safe.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass, field

from workbench.errors import AlreadyExists, InternalError, InvalidArgument, NotFound, Unsupported

#: Triton's ``kClientShmDisabledErrorStr`` (UNSUPPORTED, HTTP 501).
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
#: keys Triton reserves for its Python backend's own regions (``kTritonSharedMemoryRegionPrefix``)
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
SHM_FOLDER = "/dev/shm"
SYSTEM, CUDA = "system", "cuda"


@dataclass(eq=False)
class Region:
    """One registered region. ``mapping`` is the system region's mmap (None for CUDA),
    ``view`` its ``byte_size`` bytes from ``offset``; ``cuda`` the opened CUDA pointer."""

    name: str
    kind: str
    byte_size: int
    key: str = ""
    offset: int = 0
    device_id: int = 0
    mapping: mmap.mmap | None = None
    view: memoryview | None = None
    cuda: object | None = None
    users: int = 0
    awaiting_unregister: bool = False
    status: dict = field(default_factory=dict)

    def close(self) -> None:
        """Unmap (system) or close the IPC handle (CUDA). A numpy array that still views
        the mapping keeps it alive; the mapping is then freed when that array is."""
        if self.view is not None:
            try:
                self.view.release()
                self.mapping.close()
            except BufferError:
                pass
            self.view = None
        if self.cuda is not None:
            from workbench.engine import cuda_ipc

            cuda_ipc.close(self.cuda)
            self.cuda = None


class SharedMemoryRegistry:
    """Registered regions by name; owned by :class:`~workbench.engine.server.Server`.

    Args:
        allow_client_shm: False refuses register and unregister with Triton's UNSUPPORTED
            error (``--allow-client-shm``); status queries work either way.
    """

    def __init__(self, allow_client_shm: bool) -> None:
        self.allow_client_shm = allow_client_shm
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- registration
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes of the shm object ``key`` from ``offset`` as ``name``.

        Raises:
            Unsupported: client shared memory is disabled.
            InvalidArgument: a key of only slashes or with Triton's reserved prefix; a
                negative offset, byte_size 0, or offset + byte_size past the object's end
                ("failed to register shared memory region 'r': invalid args").
            AlreadyExists: ``name`` is registered ("shared memory region 'r' already in manager").
            InternalError: the key names no shm object ("Unable to open shared memory region: 'k'").
        """
        self._check_allowed()
        _check_key(name, key)
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args "
                                  f"(offset {offset}, byte_size {byte_size}; byte_size must be > 0)")
        with self._lock:
            self._check_new(name)
            mapping, view = _map(name, key, offset, byte_size)
            status = {"name": name, "key": key, "offset": offset, "byte_size": byte_size}
            self._regions[name] = Region(name, SYSTEM, byte_size, key=key, offset=offset,
                                         mapping=mapping, view=view, status=status)

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the CUDA IPC handle ``raw_handle`` (64 bytes) on ``device_id`` as ``name``.

        Raises:
            Unsupported: client shared memory is disabled.
            AlreadyExists: ``name`` is registered.
            InvalidArgument: no GPU / CUDA runtime ("failed to register CUDA shared memory
                region: 'r', GPUs not supported"), a malformed handle, or a handle CUDA refuses.
        """
        self._check_allowed()
        with self._lock:
            self._check_new(name)
        from workbench.engine import cuda_ipc

        pointer = cuda_ipc.open_handle(name, raw_handle, device_id, byte_size)
        with self._lock:
            if name in self._regions:
                cuda_ipc.close(pointer)
                self._check_new(name)
            status = {"name": name, "device_id": device_id, "byte_size": byte_size}
            self._regions[name] = Region(name, CUDA, byte_size, device_id=device_id,
                                         cuda=pointer, status=status)

    def unregister(self, kind: str, name: str = "") -> None:
        """Unregister ``name`` (or, with ``""``, every region) of ``kind`` (``"system"`` /
        ``"cuda"``). An unknown name is not an error (Triton). A region in use by a request
        is marked and closed when that request finishes.

        Raises:
            Unsupported: client shared memory is disabled.
        """
        self._check_allowed()
        with self._lock:
            names = [name] if name else list(self._regions)
            for region in [self._regions.get(n) for n in names]:
                if region is not None and region.kind == kind:
                    region.awaiting_unregister = True
                    if region.users == 0:
                        self._remove(region)

    def status(self, kind: str, name: str = "") -> list[dict]:
        """Triton's status rows for ``kind``: system ``{"name", "key", "offset", "byte_size"}``,
        CUDA ``{"name", "device_id", "byte_size"}``; all regions, or only ``name``.

        Raises:
            NotFound: ``name`` is not registered, or is registered as the other kind.
        """
        with self._lock:
            if not name:
                return [dict(r.status) for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            label = "cuda" if kind == CUDA else "system"
            if region is None:
                raise NotFound(f"Unable to find {label} shared memory region: '{name}'")
            if region.kind != kind:
                actual, asked = ("CUDA", "system") if region.kind == CUDA else ("system", "CUDA")
                raise NotFound(f"The region named '{name}' is registered as {actual} shared "
                               f"memory, not {asked} shared memory")
            return [dict(region.status)]

    # ----------------------------------------------------------------- use by requests
    def acquire(self, name: str, offset: int, byte_size: int) -> Region:
        """Take a use of region ``name`` for ``byte_size`` bytes at ``offset`` (Triton's
        ``GetMemoryInfo``); give it back with :meth:`release`.

        Raises:
            NotFound: "Unable to find shared memory region: 'r'".
            InvalidArgument: "Invalid offset for shared memory region: 'r'" (offset at or past
                the end) or "Invalid offset + byte size for shared memory region: 'r'".
        """
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            if offset < 0 or offset >= region.byte_size:
                raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
            if byte_size < 0 or offset + byte_size > region.byte_size:
                raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{name}'")
            region.users += 1
            return region

    def release(self, region: Region) -> None:
        """Give back a use taken by :meth:`acquire`; closes a region awaiting unregister."""
        with self._lock:
            region.users -= 1
            if region.users == 0 and region.awaiting_unregister:
                self._remove(region)

    def close(self) -> None:
        """Unmap every region (server shutdown, after requests have drained)."""
        with self._lock:
            for region in list(self._regions.values()):
                self._remove(region)

    # ----------------------------------------------------------------- helpers
    def _check_allowed(self) -> None:
        if not self.allow_client_shm:
            raise Unsupported(CLIENT_SHM_DISABLED)

    def _check_new(self, name: str) -> None:
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")

    def _remove(self, region: Region) -> None:
        if self._regions.get(region.name) is region:
            del self._regions[region.name]
        region.close()


def _check_key(name: str, key: str) -> None:
    """Triton's ``ValidateSharedMemoryKey`` texts (INVALID_ARG)."""
    stripped = key.lstrip("/")
    if not stripped:
        raise InvalidArgument(f"cannot register shared memory region '{name}' - invalid shm key '{key}'")
    if stripped.startswith(RESERVED_KEY_PREFIX):
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' with key '{key}' as the key contains "
            f"the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )


def _map(name: str, key: str, offset: int, byte_size: int) -> tuple[mmap.mmap, memoryview]:
    """Map ``[offset, offset + byte_size)`` of ``/dev/shm/<key>`` read-write (the mapping
    starts at the page below ``offset``, so any offset works, unlike a bare ``mmap``)."""
    stripped = key.lstrip("/")
    if "/" in stripped or stripped in (".", ".."):  # shm_open refuses these too (EINVAL)
        raise InternalError(f"Unable to open shared memory region: '{key}'")
    try:
        fd = os.open(os.path.join(SHM_FOLDER, stripped), os.O_RDWR)
    except OSError:
        raise InternalError(f"Unable to open shared memory region: '{key}'") from None
    try:
        if offset + byte_size > os.fstat(fd).st_size:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapping = mmap.mmap(fd, offset + byte_size - start, offset=start)
    except OSError as exc:
        raise InvalidArgument(f"failed to register shared memory region '{name}': "
                              f"unable to process address space: {exc.strerror}") from None
    finally:
        os.close(fd)
    delta = offset - start
    return mapping, memoryview(mapping)[delta : delta + byte_size]


__all__ = ["CLIENT_SHM_DISABLED", "CUDA", "SYSTEM", "Region", "SharedMemoryRegistry"]
