"""``c_python_backend_utils``: the module Triton's stub binds in C++, for models that import it.

Triton's ``triton_python_backend_utils`` re-exports the classes of its stub's embedded C++
module ``c_python_backend_utils`` (``Tensor``, ``InferenceRequest``, ...); a few models import
that module themselves (NVIDIA's L0_backend_python ``restart`` model reads
``c_python_backend_utils.shared_memory.free_memory()``). The stub installs this module under
that name beside :mod:`.pb_utils`: the same classes and functions (whatever ``pb_utils``
provides of Triton's list, :data:`FORWARDED`), plus ``shared_memory``.

``shared_memory.free_memory()``: in Triton, the free bytes of the stub's one shared-memory
region (a testing aid, "not part of the public API"). Here a stub has no region but a pool of
reusable ``/dev/shm`` segments for the tensors it sends (:class:`~.transport.SegmentPool`):
the answer is the bytes of its idle segments, ready for reuse; tensors in flight are not
counted. Two stubs of the same model that sent the same tensors answer alike, so Triton's
check that a restarted stub starts from where the first one was holds. 0 outside a stub.

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.python import pb_runtime, pb_utils

#: Triton's names in ``c_python_backend_utils`` that ``pb_utils`` re-exports: forwarded to
#: :mod:`.pb_utils` when it has them (a missing one raises AttributeError, as an absent binding)
FORWARDED = (
    "TritonError", "TritonModelException", "Tensor", "InferenceRequest", "InferenceResponse",
    "InferenceResponseSender", "ResponseIterator", "Logger", "LogLevel", "PreferredMemory",
    "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU", "Metric", "MetricFamily", "MetricKind",
    "load_model", "unload_model", "is_model_ready",
)


class SharedMemory:
    """Triton's ``c_python_backend_utils.SharedMemory`` (the stub's shared-memory manager)."""

    def free_memory(self) -> int:
        """Bytes of the stub's idle shared-memory segments, ready for reuse (0 outside a stub)."""
        runtime = pb_runtime.runtime
        return 0 if runtime is None else int(runtime.pool.idle_bytes())


#: the stub's shared-memory manager (Triton binds its ``SharedMemoryManager`` here)
shared_memory = SharedMemory()


def __getattr__(name: str) -> Any:
    if name in FORWARDED:
        return getattr(pb_utils, name)
    raise AttributeError(f"module 'c_python_backend_utils' has no attribute '{name}'")


__all__ = ["FORWARDED", "SharedMemory", "shared_memory"]
