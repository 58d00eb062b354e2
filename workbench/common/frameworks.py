"""Importing a backend's framework (``torch``, ``tensorflow``, ``onnxruntime``, ``xgboost``,
``treelite``, ``openvino``, ``nvidia.dali``, ``tensorrt``) from the model-load threads.

:func:`import_framework` runs every such import under one process-wide (reentrant) lock, so
one framework finishes importing before the next one starts; a framework already imported
through it is returned without the lock. OpenVINO imports without its usage telemetry
(:data:`WITHOUT`). Errors are the import's own (``ImportError`` for a missing module).
Beyond Triton, whose backends are shared libraries loaded by the core. Why (two imports at
once handed one a half-built module): docs/backends.md, "Framework imports".
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

log = logging.getLogger("workbench.common.frameworks")

#: held while one framework imports; reentrant: an import may pull in another (libtriton then
#: tensorflow)
_LOCK = threading.RLock()
#: names imported completely through :func:`import_framework`
_IMPORTED: set[str] = set()
#: modules a framework's import goes without (its own fallback takes their place).
#: ``openvino_telemetry``: ``import openvino`` (its ``openvino.tools.ovc``) sends a usage event
#: to Google Analytics unless the user opted out, from a ``multiprocessing`` process it forks
#: (``os.fork`` with no exec) on the load thread. A fork in a process whose gRPC threads run
#: is what printed grpc-core's "Other threads are currently calling into gRPC, skipping fork()
#: handlers" on ``workbench serve``'s terminal, and a forked copy of a threaded server may
#: hang on a lock another thread held. Without the module ovc uses its no-op
#: ``telemetry_stub``; a server sends no usage data (tritonserver's OpenVINO backend, C++,
#: sends none either).
WITHOUT: dict[str, tuple[str, ...]] = {"openvino": ("openvino_telemetry",)}


def import_framework(name: str) -> ModuleType:
    """The module ``name`` (dotted: ``"treelite.gtil"``), imported under the framework lock.

    A thread that finds another thread importing a framework waits for it (logged at debug:
    "importing '<name>' waits for another thread's framework import") instead of importing
    alongside it.

    Raises:
        ImportError: the module is not installed; any error its import raises, as it is.
    """
    module = sys.modules.get(name) if name in _IMPORTED else None
    if module is not None:
        return module
    if not _LOCK.acquire(blocking=False):
        log.debug("importing '%s' waits for another thread's framework import", name)
        _LOCK.acquire()
    try:
        with _without(WITHOUT.get(name.split(".")[0], ())):
            module = importlib.import_module(name)
        _IMPORTED.add(name)
        return module
    finally:
        _LOCK.release()


@contextlib.contextmanager
def _without(modules: tuple[str, ...]) -> Iterator[None]:
    """``modules`` fail to import inside the block (a ``None`` entry in ``sys.modules``), those
    not imported yet; after it they import again, for code that asks for them itself."""
    hidden = [name for name in modules if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # importlib's "halted" marker
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
