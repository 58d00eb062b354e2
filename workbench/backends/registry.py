"""Backend lookup: the model config's ``backend`` (or ``platform``) -> a :class:`Backend`.

Built-in backends are the rows of the backend table (:mod:`workbench.config.backend_specs`):
each row names its class (``"module:Class"``), imported here on first use. Third-party
backends register under the entry-point group ``workbench.backends`` (name = the config's
``backend`` value, object = a :class:`Backend` subclass), or add a row of their own
(``add_backend_spec``) to be auto-completed and validated like a built-in one.
"""

from __future__ import annotations

import functools
import pkgutil
from importlib.metadata import entry_points

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import Backend, BackendContext
from workbench.common.errors import InvalidModelConfig
from workbench.config.backend_specs import (
    backend_of_platform,
    backend_spec,
    served_backend_specs,
)
from workbench.config.python_based import python_based_model_file

#: classes given to :func:`register_backend` (tests, plugins): they win over the table's.
_registered: dict[str, type[Backend]] = {}


@functools.cache
def _plugins() -> dict[str, type[Backend]]:
    """The entry-point group's backends (loaded once)."""
    return {ep.name: ep.load() for ep in entry_points(group="workbench.backends")}


@functools.cache
def _resolve(path: str) -> type[Backend]:
    """A table row's ``backend_class`` (``"module:Class"``) -> the class."""
    cls = pkgutil.resolve_name(path)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"backend class '{path}' is not a workbench Backend subclass")
    return cls


def _served() -> dict[str, str]:
    """Backend name -> its row's class path, for the rows that name one."""
    return {spec.name: spec.backend_class for spec in served_backend_specs()}


def _class_of(name: str) -> type[Backend] | None:
    """:func:`register_backend`'s class, else the table row's, else an entry point's."""
    if name in _registered:
        return _registered[name]
    path = _served().get(name)
    if path:
        return _resolve(path)
    return _plugins().get(name)


def servable_backends() -> frozenset[str]:
    """Backend and platform names this server can run (for config validation)."""
    specs = served_backend_specs()
    platforms = {platform for spec in specs for platform in spec.platforms}
    return (frozenset(_registered) | frozenset(_plugins()) | {spec.name for spec in specs}
            | platforms)


def backend_for(config: ModelConfig, context: BackendContext | None = None,
                backend_directory: str = "") -> Backend:
    """The backend that serves ``config``, with the engine's ``context`` attached: a known
    one, else a Python-based backend of ``backend_directory`` (``--backend-directory``:
    ``<dir>/<backend>/model.py``, run by the Python backend for every model naming it;
    :mod:`workbench.config.python_based`).

    Raises:
        InvalidModelConfig: neither ``backend`` nor ``platform`` names a known backend.
    """
    name = config.backend or backend_of_platform(config.platform)
    cls = _class_of(name) if name else None
    based_on = python_based_model_file(config, backend_directory) if cls is None else None
    if based_on is not None:
        from workbench.backends.python import PythonBackend

        python_based = PythonBackend(based_on)
        python_based.context = context
        return python_based
    if cls is None:
        what = config.backend or config.platform or "<none>"
        raise InvalidModelConfig(
            f"unable to find backend '{what}' for model '{config.name}'; "
            f"available: {', '.join(sorted(servable_backends()))}"
        )
    backend = cls()
    backend.context = context
    spec = backend_spec(name)
    if spec is not None:
        backend.default_model_filename = spec.default_model_filename
    return backend


def register_backend(name: str, cls: type[Backend]) -> None:
    """Register ``cls`` for configs with ``backend: "<name>"`` (tests, plugins)."""
    _registered[name] = cls
