"""Triton's in-process ``Server``: the workbench's engine behind the shape of Triton's
``tritonserver`` package.

``Server(...).start()`` starts one :class:`workbench.Server` (the engine that ``workbench
serve``, the Jupyter host and a notebook start with ``await server.start()``) on the loop
thread of :mod:`workbench.tritonserver._loop`; every method hands its call to that loop and
waits, translating the engine's errors to Triton's exception classes
(:mod:`workbench.tritonserver._errors`). No port is opened: everything runs in this process.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import workbench
from workbench.frontends.metrics import MetricsFrontend
from workbench.serving.drain import drain_engine
from workbench.tritonserver._enums import MetricFormat
from workbench.tritonserver._errors import (
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    UnsupportedError,
    triton_error,
)
from workbench.tritonserver._loop import EngineLoop
from workbench.tritonserver._model import Model
from workbench.tritonserver._options import Options

T = TypeVar("T")

#: the states in which :meth:`Server.unload` considers a version unloaded (Triton's)
UNLOADED_STATES = (None, "UNAVAILABLE")


class ModelDictionary(dict):
    """:meth:`Server.models`: ``(name, version)`` -> :class:`Model`; a name alone gives the
    model at version -1.

    Raises:
        KeyError: an unknown model ("Unknown Model: ...").
    """

    def __init__(self, server: Server, models: list[Model]) -> None:
        super().__init__()
        for model in models:
            self[(model.name, model.version)] = model
        self._server = server
        self._names = {name for name, _ in self.keys()}

    def __getitem__(self, key: Any) -> Model:
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._names:
            return Model(self._server, name=key, version=-1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """An in-process inference server (Triton's ``tritonserver.Server``).

    Args:
        options: an :class:`Options`; or its fields as keyword arguments
            (``Server(model_repository=..., model_control_mode=ModelControlMode.EXPLICIT)``).
            Checked at :meth:`start`.
    """

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        self.options = options if options is not None else Options(**kwargs)
        self._engine: workbench.Server | None = None
        self._loop: EngineLoop | None = None
        self._metrics: MetricsFrontend | None = None
        self._engine_options: workbench.ServerOptions | None = None

    # ----------------------------------------------------------------- plumbing
    def check_started(self) -> None:
        """Raises InvalidArgumentError("Server not started") unless started."""
        if self._engine is None:
            raise InvalidArgumentError("Server not started")

    @property
    def engine(self) -> workbench.Server:
        """The engine (for the API's own classes).

        Raises:
            InvalidArgumentError: not started."""
        self.check_started()
        assert self._engine is not None
        return self._engine

    @property
    def engine_loop(self) -> EngineLoop:
        """The engine's loop thread (raises InvalidArgumentError when not started)."""
        self.check_started()
        assert self._loop is not None
        return self._loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the engine's loop and wait; engine errors become Triton's."""
        try:
            return self.engine_loop.call(coroutine)
        except workbench.WorkbenchError as exc:
            raise triton_error(exc) from None

    # ----------------------------------------------------------------- lifecycle
    def start(self, wait_until_ready: bool = False, polling_interval: float = 0.1,
              timeout: float | None = None) -> Server:
        """Start the engine and load the models the control mode starts with (NONE, POLL:
        all; EXPLICIT: ``startup_models``; returns once those loads ended).

        Args:
            wait_until_ready: wait for :meth:`ready` (polling every ``polling_interval``
                seconds, up to ``timeout`` seconds or forever).

        Raises:
            InvalidArgumentError: already started ("Server already started"), bad options, a
                model repository that does not exist (with ``exit_on_error``).
            InternalError: a model failed to load at start with ``exit_on_error`` ("failed to
                load all models: ...").
            UnavailableError: ``timeout`` passed before the server was ready ("Timeout before
                ready").
        """
        if self._engine is not None:
            raise InvalidArgumentError("Server already started")
        engine_options = self.options.server_options()
        loop = EngineLoop()
        engine = workbench.Server(engine_options)
        try:
            loop.call(engine.start())
            metrics = MetricsFrontend(engine, engine_options) if engine_options.allow_metrics else None
        except workbench.WorkbenchError as exc:
            loop.call(engine.stop())
            loop.close()
            raise triton_error(exc) from None
        self._engine, self._loop, self._metrics = engine, loop, metrics
        self._engine_options = engine_options
        started = time.monotonic()
        while wait_until_ready and not self.ready() and (timeout is None or time.monotonic() - started < timeout):
            time.sleep(polling_interval)  # Triton's documented polling
        if wait_until_ready and not self.ready():
            raise UnavailableError("Timeout before ready")
        return self

    def stop(self) -> None:
        """Stop: requests in flight finish, models unload (within ``exit_timeout``
        seconds), the engine's thread ends. A stopped server may be started again.

        Raises:
            InvalidArgumentError: not started."""
        engine, loop, options = self.engine, self.engine_loop, self._engine_options
        assert options is not None
        try:
            loop.call(drain_engine(engine, options, None))
        finally:
            loop.close()
            self._engine = self._loop = self._metrics = None

    # ----------------------------------------------------------------- health, metadata
    def live(self) -> bool:
        """True while the server runs (Triton's ``TRITONSERVER_ServerIsLive``)."""
        return self.engine.is_live()

    def ready(self) -> bool:
        """True when live and (with ``strict_readiness``) every model loaded at start is
        READY (Triton's ``TRITONSERVER_ServerIsReady``)."""
        return self.engine.is_ready()

    def metadata(self) -> dict[str, Any]:
        """``{"name", "version", "extensions"}`` as Triton's server metadata."""
        return dict(self.run(self.engine.metadata()))

    def metrics(self, metric_format: MetricFormat = MetricFormat.PROMETHEUS) -> str:
        """The Prometheus text of ``GET /metrics`` (Triton's families and names).

        Raises:
            UnsupportedError: metrics were disabled (``metrics=False``)."""
        self.check_started()
        if self._metrics is None:
            raise UnsupportedError("metrics not supported")
        metrics = self._metrics

        async def render() -> bytes:
            return metrics.render()

        return self.run(render()).decode()

    # ----------------------------------------------------------------- models
    def model(self, model_name: str, model_version: int = -1) -> Model:
        """A :class:`Model` (not checked until used)."""
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        """Every model of the repositories: ``{(name, version): Model}`` with its ``state``
        and ``reason``; a model never loaded has version -1 and state None (Triton's index)."""
        rows = self.run(self.engine.repository_index(exclude_not_ready))
        models = [Model(self, row["name"], int(row["version"]) if "version" in row else -1,
                        row.get("state"), row.get("reason")) for row in rows]
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: dict[str, str | int | bool | bytes] | None = None) -> Model:
        """Load (or reload) a model and wait until it is loaded (EXPLICIT mode).

        Args:
            parameters: Triton's load parameters: ``"config"`` (a JSON model config
                overriding ``config.pbtxt``) and ``"file:<version>/<name>"`` (bytes: the
                model's files, loaded from a temporary folder instead of the repository).

        Raises:
            UnavailableError / InvalidArgumentError / InternalError: the engine's load errors
                (Triton's texts), e.g. not in EXPLICIT mode, a config that does not parse.
        """
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, value in (parameters or {}).items():
            if key == "config":
                config = value.decode() if isinstance(value, bytes) else str(value)
            elif key.startswith("file:"):
                files[key[len("file:"):]] = value if isinstance(value, bytes) else str(value).encode()
            else:
                raise InvalidArgumentError(f"unrecognized load parameter '{key}'")
        self.run(self.engine.load_model(model_name, config, files or None))
        return self.model(model_name)

    def unload(self, model: str | Model, unload_dependents: bool = False, wait_until_unloaded: bool = False,
               polling_interval: float = 0.1, timeout: float | None = None) -> None:
        """Unload a model (and, with ``unload_dependents``, the composing models only it
        used); with ``wait_until_unloaded``, wait until each of its versions is UNAVAILABLE
        (polling every ``polling_interval`` seconds, up to ``timeout`` seconds)."""
        name = model.name if isinstance(model, Model) else model
        self.run(self.engine.unload_model(name, unload_dependents))
        if not wait_until_unloaded:
            return
        keys = [key for key in self.models() if key[0] == name]
        started = time.monotonic()
        while not self._unloaded(keys) and (timeout is None or time.monotonic() - started < timeout):
            time.sleep(polling_interval)

    def _unloaded(self, keys: list[tuple[str, int]]) -> bool:
        models = self.models()
        return all(key not in models or models[key].state in UNLOADED_STATES for key in keys)

    # ----------------------------------------------------------------- repositories
    def poll_model_repository(self) -> None:
        """Rescan the repositories and apply what changed (POLL mode).

        Raises:
            UnavailableError: not in POLL mode ("polling is disabled")."""
        self.run(self.engine.poll_repository())

    def register_model_repository(self, repository_path: str, name_mapping: dict[str, str] | None = None) -> None:
        """Add a model repository (EXPLICIT mode); ``name_mapping``: a sub-folder -> the
        model name it is served as.

        Raises:
            UnsupportedError: not in EXPLICIT mode (Triton's text).
            InvalidArgumentError: the folder does not exist.
            AlreadyExistsError: already registered, or a mapped name already taken.
        """
        self.run(self.engine.register_model_repository(repository_path, name_mapping or {}))

    def unregister_model_repository(self, repository_path: str) -> None:
        """Remove a registered model repository (EXPLICIT mode); its loaded models stay
        loaded, as Triton's.

        Raises:
            UnsupportedError: not in EXPLICIT mode.
            InvalidArgumentError: not a registered repository.
        """
        self.run(self.engine.unregister_model_repository(repository_path))

    def __enter__(self) -> Server:
        return self if self._engine is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self._engine is not None:
            self.stop()


class Metric:
    """Triton's custom metrics (``Metric``): not supported here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedError("custom metrics (Metric, MetricFamily) are not supported by the workbench")


class MetricFamily(Metric):
    """Triton's custom metric families: not supported here."""


__all__ = ["Metric", "MetricFamily", "ModelDictionary", "Server", "TritonError"]
