"""The shared-memory registry: client regions registered by name (Triton's SharedMemoryManager).

Two kinds of region share one namespace of names, as in Triton:

- system regions: a POSIX shared-memory object (``shm_open`` key, e.g. ``"/input0"``, which
  is the file ``/dev/shm/input0``), ``byte_size`` bytes from ``offset``. The object is opened
  once, at registration, with ``O_NOFOLLOW`` and must be a regular file on the shm file
  system (a symlink planted in ``/dev/shm`` never gives access to another file). Its bytes
  move through :mod:`~workbench.engine.shm.shm_copy` (:meth:`Region.read`, :meth:`Region.write`):
  ``process_vm_readv`` / ``process_vm_writev`` on the server's own mapping of the object, or
  ``pread`` / ``pwrite`` on the kept descriptor where those are unavailable, never a plain
  copy through a mapping: a client that truncates its object after registering gets a clean
  INVALID_ARG for the requests that use it, where a plain copy would kill the whole server
  with SIGBUS. Each request checks the object's size first
  (:meth:`SharedMemoryRegistry.acquire`). ``multiprocessing.shared_memory`` is deliberately
  not used: its resource tracker would unlink segments that the client created.
- CUDA regions: a ``cudaIpcMemHandle_t`` opened on ``device_id`` (:mod:`cuda_ipc`, loaded
  only when a CUDA region is registered).

Lifetime follows Triton: a request that names a region holds a use of it
(:meth:`SharedMemoryRegistry.acquire` / :meth:`release`); unregistering a region in use
succeeds but only marks it, and the mapping is closed when its last request releases it
(Triton's ``awaiting_unregister_``). Until then it still shows in the status and serves
requests. Every method is thread-safe.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.common.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from workbench.common.results import CudaSharedMemoryStatus, SystemSharedMemoryStatus
from workbench.engine.shm import read_buffers
from workbench.engine.shm.shm_copy import SPLIT_BYTES, ObjectEnded, ShmObject

if TYPE_CHECKING:  # loaded only when a CUDA region is registered
    from workbench.engine.shm.cuda_ipc import CudaPointer

#: Triton's ``kClientShmDisabledErrorStr`` (UNSUPPORTED, HTTP 501).
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
#: keys Triton reserves for its Python backend's own regions (``kTritonSharedMemoryRegionPrefix``)
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
SHM_FOLDER = "/dev/shm"
SYSTEM, CUDA = "system", "cuda"
#: C's SIZE_MAX on 64-bit hosts: Triton's bound for offset + byte_size
SIZE_MAX = 2**64 - 1
#: copies of a system region this large are split over two threads (:mod:`shm_copy`)
SPLIT_READ_BYTES = SPLIT_BYTES


@dataclass(eq=False)
class Region:
    """One registered region. ``shm`` is the system region's open shm object (its ``byte_size``
    bytes from ``offset``; None for CUDA), ``cuda`` the opened CUDA pointer."""

    name: str
    kind: str
    byte_size: int
    key: str = ""
    offset: int = 0
    device_id: int = 0
    shm: ShmObject | None = None
    cuda: CudaPointer | None = None
    users: int = 0
    awaiting_unregister: bool = False

    def check_size(self) -> None:
        """Check that the system region's object still holds the whole region (a client may
        ``ftruncate`` it at any time).

        Raises:
            InvalidArgument: "Invalid shared memory region: 'r': its shared memory object
                '/k' is now N bytes, ..." (or the object can no longer be read).
        """
        try:
            size = self._shm().size()
        except OSError as exc:
            raise InvalidArgument(f"Invalid shared memory region: '{self.name}': "
                                  f"{exc.strerror}") from None
        if size < self.offset + self.byte_size:
            raise self._truncated(size)

    def read(self, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes at ``offset`` (from the region's start) of a system region, copied
        into a buffer of its own without ever faulting (:mod:`~workbench.engine.shm.shm_copy`:
        process_vm on the server's mapping of the object, or ``preadv``; split over two threads
        from :data:`SPLIT_READ_BYTES` on). Large reads reuse a buffer no tensor refers to any
        more (:mod:`~workbench.engine.shm.read_buffers`: no page faults). A truncated object is an
        error, never a fault.

        Raises:
            InvalidArgument: the object ends before the bytes asked for (truncated).
        """
        view = read_buffers.take(byte_size)  # not zero-filled: half the cost of a bytearray
        self._copy(self._shm().read_into, view, offset)
        return view

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset`` (from the region's start) of a system region, after
        checking that the object still holds the region (:mod:`~workbench.engine.shm.shm_copy`:
        process_vm on the server's mapping, or ``pwrite``; split over two threads from
        :data:`SPLIT_READ_BYTES` on).

        Raises:
            InvalidArgument: the object was truncated below the region.
        """
        self.check_size()
        self._copy(self._shm().write_from, memoryview(data).cast("B"), offset)

    def _shm(self) -> ShmObject:
        assert self.shm is not None, "a system region holds its object (closed ones raise EBADF)"
        return self.shm

    def _copy(self, copy, view: memoryview, offset: int) -> None:
        """``copy(view, offset)``, its errors as the client errors of a damaged region."""
        try:
            copy(view, offset)
        except ObjectEnded as ended:
            if 0 <= ended.object_size < self.offset + self.byte_size or ended.object_size == -1:
                raise self._truncated(max(ended.object_size, 0)) from None
            raise InvalidArgument(f"Invalid shared memory region: '{self.name}': "
                                  f"{ended.strerror}") from None
        except OSError as exc:
            raise InvalidArgument(f"Invalid shared memory region: '{self.name}': "
                                  f"{exc.strerror}") from None

    def close(self) -> None:
        """Close the shm object (unmapped and its descriptor closed once no copy runs: system)
        or the IPC handle (CUDA)."""
        if self.shm is not None:
            self.shm.close()  # idempotent; later uses raise EBADF (a client error)
        if self.cuda is not None:
            from workbench.engine.shm import cuda_ipc

            cuda_ipc.close(self.cuda)
            self.cuda = None

    def _truncated(self, size: int) -> InvalidArgument:
        return InvalidArgument(
            f"Invalid shared memory region: '{self.name}': its shared memory object '{self.key}' "
            f"is now {size} bytes, but the region was registered over bytes {self.offset} to "
            f"{self.offset + self.byte_size} of it (was it truncated after registration?)"
        )


class SharedMemoryRegistry:
    """Registered regions by name; owned by :class:`~workbench.engine.api.server.Server`.

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
            InvalidArgument: a key that is no ``shm_open`` name (only slashes, a ``/`` after the
                leading ones, NUL, ``.`` / ``..``) or with Triton's reserved prefix ("cannot
                register shared memory region 'r' - invalid shm key 'k'"); a negative offset,
                byte_size 0, or offset + byte_size past the object's end ("failed to register
                shared memory region 'r': invalid args"); the key names no regular file on the
                shm file system (absent, a symlink, a FIFO, a folder: "Unable to open shared
                memory region: 'k'", INTERNAL in Triton, a client error here).
            AlreadyExists: ``name`` is registered ("shared memory region 'r' already in manager").
        """
        self._check_allowed()
        _check_key(name, key)
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args "
                                  f"(offset {offset}, byte_size {byte_size}; byte_size must be > 0)")
        with self._lock:
            self._check_new(name)
            fd = _open(name, key, offset, byte_size)
            self._regions[name] = Region(name, SYSTEM, byte_size, key=key, offset=offset,
                                         shm=ShmObject(fd, offset, byte_size))

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
        from workbench.engine.shm import cuda_ipc

        pointer = cuda_ipc.open_handle(name, raw_handle, device_id, byte_size)
        with self._lock:
            if name in self._regions:
                cuda_ipc.close(pointer)
                self._check_new(name)
            self._regions[name] = Region(name, CUDA, byte_size, device_id=device_id, cuda=pointer)

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

    def system_status(self, name: str = "") -> list[SystemSharedMemoryStatus]:
        """Triton's status rows of the system regions (all, or only ``name``), in
        registration order.

        Raises:
            NotFound: ``name`` is not registered, or is registered as a CUDA region.
        """
        return [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
                for r in self._find(SYSTEM, name)]

    def cuda_status(self, name: str = "") -> list[CudaSharedMemoryStatus]:
        """Triton's status rows of the CUDA regions (all, or only ``name``), in registration
        order.

        Raises:
            NotFound: ``name`` is not registered, or is registered as a system region.
        """
        return [{"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                for r in self._find(CUDA, name)]

    def _find(self, kind: str, name: str) -> list[Region]:
        """The regions of ``kind`` (all, or only ``name``; see :meth:`system_status`)."""
        with self._lock:
            if not name:
                return [r for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            label = "cuda" if kind == CUDA else "system"
            if region is None:
                raise NotFound(f"Unable to find {label} shared memory region: '{name}'")
            if region.kind != kind:
                actual, asked = ("CUDA", "system") if region.kind == CUDA else ("system", "CUDA")
                raise NotFound(f"The region named '{name}' is registered as {actual} shared "
                               f"memory, not {asked} shared memory")
            return [region]

    # ----------------------------------------------------------------- use by requests
    def acquire(self, name: str, offset: int, byte_size: int) -> Region:
        """Take a use of region ``name`` for ``byte_size`` bytes at ``offset`` (Triton's
        ``GetMemoryInfo``); give it back with :meth:`release`. A system region's object is
        checked to still hold the whole region (``fstat``).

        Raises:
            NotFound: "Unable to find shared memory region: 'r'".
            InvalidArgument: "Invalid offset for shared memory region: 'r'" (offset at or past
                the end), "Integer overflow detected: byte_size (B) + offset (O) exceeds maximum
                value (SIZE_MAX) for region 'r'" (a sum past 2**64 - 1, Triton's check) or
                "Invalid offset + byte size for shared memory region: 'r'"; the
                client truncated the object ("Invalid shared memory region: 'r': its shared
                memory object '/k' is now N bytes, ...").
        """
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            if offset < 0 or offset >= region.byte_size:
                raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
            if byte_size > SIZE_MAX - offset:  # Triton's size_t overflow check and text
                raise InvalidArgument(
                    f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) "
                    f"exceeds maximum value ({SIZE_MAX}) for region '{name}'")
            if byte_size < 0 or offset + byte_size > region.byte_size:
                raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{name}'")
            if region.kind == SYSTEM:
                region.check_size()
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
    """Triton's ``ValidateSharedMemoryKey`` texts (INVALID_ARG), plus what ``shm_open`` would
    refuse or misread: a ``/`` after the leading ones, ``.`` / ``..``, NUL (which the C string
    would cut short)."""
    stripped = key.lstrip("/")
    if not stripped or "/" in stripped or "\0" in stripped or stripped in (".", ".."):
        shown = key.replace("\0", "\\0")
        raise InvalidArgument(f"cannot register shared memory region '{name}' - invalid shm key '{shown}'")
    if stripped.startswith(RESERVED_KEY_PREFIX):
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' with key '{key}' as the key contains "
            f"the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )


def _open(name: str, key: str, offset: int, byte_size: int) -> int:
    """Open ``/dev/shm/<key>`` read-write and return the descriptor: never through a symlink
    (``O_NOFOLLOW``), never blocking (``O_NONBLOCK``: a FIFO), not inherited by child processes
    (``O_CLOEXEC``), and only a regular file on the shm file system itself (``fstat``: not a
    FIFO, device or folder, not another file system mounted below ``/dev/shm``) that holds
    ``offset + byte_size`` bytes. The key was checked by :func:`_check_key`."""
    unable = InvalidArgument(f"Unable to open shared memory region: '{key}'")
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(os.path.join(SHM_FOLDER, key.lstrip("/")), flags)
    except OSError:
        raise unable from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_dev != os.stat(SHM_FOLDER).st_dev:
            raise unable
        if offset + byte_size > found.st_size:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["CLIENT_SHM_DISABLED", "CUDA", "SPLIT_READ_BYTES", "SYSTEM", "Region", "SharedMemoryRegistry"]
