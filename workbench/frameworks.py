"""Importing a backend's framework (``torch``, ``tensorflow``, ``onnxruntime``, ``xgboost``,
``treelite``, ``openvino``, ``nvidia.dali``, ``tensorrt``) from the model-load threads.

Models load on parallel threads, and each backend imports its framework lazily, on its first
load. Two such imports running at once can hand one of them a partially initialized module:
a framework that looks at another one while importing (``sys.modules.get("torch")``, as
array-API helpers do), or a circular import across the two that importlib's deadlock
detection answers with the half-built module, fails with "partially initialized module
'torch' has no attribute 'Tensor'". Seen on the sample repository: ``cancer_xgboost`` (fil,
xgboost) failed while ``digits_torchscript`` imported torch on another thread.

:func:`import_framework` runs every such import under one process-wide lock, so one framework
finishes importing before the next one starts; a framework this process already imported
through it is returned without the lock. Beyond Triton, whose backends are shared libraries
loaded by the core.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from types import ModuleType

log = logging.getLogger("workbench.frameworks")

#: held while one framework imports; reentrant: an import may pull in another (libtriton then
#: tensorflow)
_LOCK = threading.RLock()
#: names imported completely through :func:`import_framework`
_IMPORTED: set[str] = set()


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
        module = importlib.import_module(name)
        _IMPORTED.add(name)
        return module
    finally:
        _LOCK.release()
