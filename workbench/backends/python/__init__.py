"""Triton's Python backend (``backend: "python"``, ``<version>/model.py``).

Unmodified Triton Python models run here: each model instance runs in its own stub
process (:mod:`.stub`) that imports ``model.py`` with ``triton_python_backend_utils``
(:mod:`.pb_utils`) available, so a crash, hang or leak in model code never takes the
server down. Tensors cross the process boundary inline (up to 128 KiB) or through
reusable POSIX shared-memory segments (:mod:`.transport`); decoupled response senders and
BLS (:mod:`.bls`) and model control (:mod:`.control`) call back into the server.

Server side: :class:`PythonBackend` -> :class:`~.instance.PythonInstance` ->
:class:`~.process.StubProcess`. Stub side: :mod:`.stub`, :mod:`.stub_calls`,
:mod:`.pb_utils`, :mod:`.pb_tensor`, :mod:`.pb_log`, :mod:`.pb_args` (argument checks),
:mod:`.pb_control`, :mod:`.pb_runtime`, :mod:`.model_config`, :mod:`.c_utils` (``c_python_backend_utils``) (numpy
and the standard library only).
Auto-complete (``auto_complete_config``) is run by the config layer
(``workbench.config.python_autocomplete``), which starts the stub in its
``--auto-complete`` mode.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import Backend, InstanceSpec, ModelInstance


class PythonBackend(Backend):
    """Creates :class:`~.instance.PythonInstance` objects (one stub process each).

    Args:
        python_based: the ``model.py`` of a Python-based backend (``--backend-directory``)
            that every model of this backend runs, instead of its version folder's own.
    """

    def __init__(self, python_based: Path | None = None) -> None:
        self.python_based = python_based

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        """Start the instance's stub and run the model's ``initialize``.

        Raises:
            ModelLoadError: missing model file, stub start failure or ``initialize`` error.
        """
        from workbench.backends.python.instance import PythonInstance

        _remove_stale_segments_once()
        return PythonInstance(config, version_dir, spec, self.context, self.python_based)


_stale_checked = threading.Event()


def _remove_stale_segments_once() -> None:
    """Remove shared memory left by killed server processes (once per server process)."""
    if not _stale_checked.is_set():
        from workbench.backends.python.transport import remove_stale_segments

        _stale_checked.set()
        remove_stale_segments()


__all__ = ["PythonBackend"]
