"""Backend lookup: the model config's ``backend`` (or ``platform``) -> a :class:`Backend`.

Third-party backends register under the entry-point group ``workbench.backends``
(name = the config's ``backend`` value, object = a :class:`Backend` subclass).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import Backend, BackendContext
from workbench.backends.onnxruntime import OnnxRuntimeBackend
from workbench.backends.openvino import OpenVinoBackend
from workbench.backends.python import PythonBackend
from workbench.backends.pytorch import PyTorchBackend
from workbench.backends.tensorrt import TensorRTBackend
from workbench.errors import InvalidModelConfig

#: platform names that imply a backend (Triton's legacy ``platform`` field).
PLATFORM_TO_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}

_BUILTIN: dict[str, type[Backend]] = {
    name: cls
    for cls in (OnnxRuntimeBackend, OpenVinoBackend, PythonBackend, PyTorchBackend, TensorRTBackend)
    for name in cls.names
}


@functools.cache
def _registered() -> dict[str, type[Backend]]:
    found = dict(_BUILTIN)
    for ep in entry_points(group="workbench.backends"):
        found.setdefault(ep.name, ep.load())
    return found


def servable_backends() -> frozenset[str]:
    """Backend and platform names this server can run (for config validation)."""
    return frozenset(_registered()) | frozenset(PLATFORM_TO_BACKEND)


def backend_for(config: ModelConfig, context: BackendContext | None = None) -> Backend:
    """The backend that serves ``config``, with the engine's ``context`` attached.

    Raises:
        InvalidModelConfig: neither ``backend`` nor ``platform`` names a known backend.
    """
    name = config.backend or PLATFORM_TO_BACKEND.get(config.platform, "")
    cls = _registered().get(name)
    if cls is None:
        what = config.backend or config.platform or "<none>"
        raise InvalidModelConfig(
            f"unable to find backend '{what}' for model '{config.name}'; "
            f"available: {', '.join(sorted(servable_backends()))}"
        )
    backend = cls()
    backend.context = context
    return backend


def register_backend(name: str, cls: type[Backend]) -> None:
    """Register ``cls`` for configs with ``backend: "<name>"`` (tests, plugins)."""
    _registered()[name] = cls
