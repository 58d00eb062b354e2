"""``Server``: the engine's single public object; every frontend calls its async methods.

Usage::

    async with Server(ServerOptions(model_repository=["models"])) as server:
        response = await server.infer(request)

The server owns every model, scheduler, thread and task it starts; ``stop()``
lets queued and executing requests finish before unloading.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._version import __version__
from workbench.backends.base import BackendContext
from workbench.engine.config_files import ConfigFileAPI
from workbench.engine.ensembles import (
    stop_waves,
)
from workbench.engine.model import LoadedModel
from workbench.engine.poller import RepositoryPoller
from workbench.engine.registry import ModelEntry
from workbench.engine.repository_api import RepositoryAPI, entry_reason
from workbench.engine.response_cache import ResponseCache
from workbench.engine.retiring import RetiringVersions
from workbench.engine.shared_memory import SharedMemoryRegistry
from workbench.engine.shared_memory_api import SharedMemoryAPI
from workbench.engine.shared_memory_io import AttachedRequest, uses_shared_memory
from workbench.engine.settings import LogSettings, TraceSettings
from workbench.engine.settings_api import SettingsAPI
from workbench.errors import (
    InvalidArgument,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    ServerNotReady,
)
from workbench.options import ServerOptions
from workbench.repository.overrides import OverrideStore
from workbench.repository.remote import RemoteRepository, resolve_repositories
from workbench.repository.repository import ModelRepository
from workbench.scheduling.ensemble import StepAdapt
from workbench.scheduling.rate_limiter import RateLimiter, parse_resource
from workbench.statistics import ComputeTotals, ModelStatistics, SuccessObserver
from workbench.types import InferenceRequest, InferenceResponse, ModelReadyState

log = logging.getLogger(__name__)

#: Triton protocol extensions this server implements (``GET /v2`` and gRPC ``ServerMetadata``
#: list them): tritonserver 2.5x's whole list (core ``server.cc``), in its order; every one is
#: implemented here (``sequence``: the sequence batcher; ``schedule_policy``: dynamic batching
#: queue policies; ``cuda_shared_memory`` answers "GPUs not supported" where none is found).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


class Server(RepositoryAPI, ConfigFileAPI, SharedMemoryAPI, SettingsAPI):
    """The inference engine: model repository, model lifecycle, inference, statistics.

    The repository API (index, load / unload / poll, hot reload) is in
    :class:`~workbench.engine.repository_api.RepositoryAPI`, config file editing (read,
    validate, atomic write with backup, revert) in
    :class:`~workbench.engine.config_files.ConfigFileAPI`, the shared-memory and settings
    extensions in their own mixins; this class holds the state and the inference path.

    Args:
        options: server options (model repositories, control mode, ...).
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self._models: dict[str, ModelEntry] = {}
        #: model -> the models its ensemble steps call (() for other models), for every
        #: model read for loading and not unloaded since
        self._dependencies: dict[str, tuple[str, ...]] = {}
        #: models loaded by name (start-up list, load API); the others were loaded as an
        #: ensemble's composing models (Triton's ``explicitly_load_``)
        self._explicit: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        #: model -> the versions its load in progress loads ([] until its config is read)
        self._loading: dict[str, list[int]] = {}
        #: model -> background drains of its versions that left service (reloads)
        self._drains: dict[str, set[asyncio.Task]] = {}
        #: versions that left service on a reload but still serve their live sequences
        self._retiring = RetiringVersions()
        self._poller: RepositoryPoller | None = None
        self._repository: ModelRepository | None = None
        #: remote repositories (s3://, gs://, ...) and their local mirrors
        self._remotes: list[RemoteRepository] = []
        self._load_executor = ThreadPoolExecutor(
            options.model_load_thread_count, thread_name_prefix="model-load"
        )
        self._live = False
        self._stopping = False
        self._observers: list[SuccessObserver] = []
        size = options.response_cache_byte_size
        self._cache = ResponseCache(size) if size > 0 else None
        self._rate_limiter: RateLimiter | None = None
        self._shared_memory = SharedMemoryRegistry(options.allow_client_shm)
        self._log_settings = LogSettings(options)
        self._trace_settings = TraceSettings(options)
        self._backend_context: BackendContext | None = None
        #: temporary model folders of loads with file overrides (removed with their model)
        self._overrides = OverrideStore()

    # ----------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Scan the repositories and load the start-up models (all in ``none`` and ``poll``
        mode, the ``load_model`` list in ``explicit`` mode), then, in ``poll`` mode, rescan
        every ``repository_poll_secs`` seconds (:meth:`poll_repository`).

        As tritonserver: a model that fails to load is UNAVAILABLE with its reason and the
        others serve; with ``exit_on_error`` (tritonserver's default, true) any such failure
        stops the server instead and raises.

        Remote repositories (``s3://``, ``gs://``, ``az://``) are synced into their local
        mirrors first (:mod:`workbench.repository.remote`); the engine serves those.

        Raises:
            InvalidArgument: a model repository does not exist (a remote one: or cannot be
                read, or its filesystem package is not installed).
            ModelLoadError: a model failed to load and ``exit_on_error`` is set ("failed to
                load all models: '<model>': <reason>; ...").
        """
        self._rate_limiter = _rate_limiter(self.options)
        self._backend_context = BackendContext(asyncio.get_running_loop(), self.infer_stream)
        paths, self._remotes = await asyncio.to_thread(
            resolve_repositories, self.options.model_repository, self.options.model_repository_cache
        )
        self._repository = ModelRepository(paths)
        if self.options.model_control_mode == "poll":
            self._poller = RepositoryPoller(self, self._repository, self.options.repository_poll_secs,
                                            self._sync_remotes if self._remotes else None)
            await self._poller.baseline()  # changes made while the start-up models load count
        names = await asyncio.to_thread(self._startup_models)
        self._explicit.update(names)
        entries = await self._load_models(names)
        self._live = True
        failed = [entry for entry in entries.values() if entry.failed()]
        for entry in failed:
            log.error("failed to load '%s': %s", entry.name, entry_reason(entry))
        if failed and self.options.exit_on_error:
            reasons = "; ".join(f"'{e.name}': {entry_reason(e)}" for e in failed)
            await self.stop()  # marks every version "unloaded": the reasons are read first
            raise ModelLoadError(f"failed to load all models: {reasons}")
        if self._poller is not None:
            self._poller.start()

    def _startup_models(self) -> list[str]:
        assert self._repository is not None
        found = sorted(self._repository.scan())
        if self.options.model_control_mode != "explicit":
            if self.options.load_model:
                log.warning("--load-model is ignored in model control mode '%s': every model "
                            "in the repository is loaded", self.options.model_control_mode)
            return found
        wanted = self.options.load_model
        return found if "*" in wanted else [n for n in wanted]

    async def stop(self) -> None:
        """Refuse new requests, drain in-flight ones, unload every model. Idempotent.

        Ensembles stop before the models they call, so their in-flight requests complete.
        In ``poll`` mode polling stops first (a poll under way finishes; what it loads after
        this call is unloaded again at once), and versions still draining after a reload
        finish before the serving ones stop; versions still serving live sequences after a
        reload stop waiting for them (those sequences end, their requests in flight finish)."""
        self._stopping = True
        if self._poller is not None:
            await self._poller.stop()
        self._retiring.end()
        await self._retiring.finished()
        while self._drains:
            await self._drained(*self._drains)
        for entries in stop_waves(dict(self._models), self._dependencies):
            await asyncio.gather(*(e.stop() for e in entries))
        self._load_executor.shutdown(wait=False)
        await asyncio.to_thread(self._overrides.close)
        self._shared_memory.close()
        self._live = False

    # ----------------------------------------------------------------- health & metadata
    def is_live(self) -> bool:
        """True once started and until stopped (``/v2/health/live``)."""
        return self._live

    def is_ready(self) -> bool:
        """Ready to serve (``/v2/health/ready``): live, not stopping and, with strict
        readiness, no model failed to load (UNAVAILABLE with a reason other than
        "unloaded", Triton's rule). Unlike Triton, versions LOADING or UNLOADING (a load,
        a drain after a reload) do not make the server unready: a hot reload never takes
        a replica out of its load balancer."""
        if not self._live or self._stopping:
            return False
        if not self.options.strict_readiness:
            return True
        return not any(entry.failed() for entry in self._models.values())

    async def metadata(self) -> dict:
        """``GET /v2``: ``{"name", "version", "extensions"}``."""
        return {"name": self.options.server_id, "version": __version__, "extensions": EXTENSIONS}

    async def model_metadata(self, name: str, version: str = "") -> dict:
        """``GET /v2/models/<m>[/versions/<v>]``: name, versions, platform, inputs, outputs.

        Raises:
            ModelNotFound / ModelNotReady: as :meth:`infer` resolves the model.
        """
        model = self._resolve(name, version)
        entry = self._models[name]
        inputs, outputs = model.io.metadata()
        versions = [str(v) for v in entry.ready_versions()] if version in ("", "-1") else [version]
        return {
            "name": name,
            "versions": versions,
            "platform": model.config.platform or model.config.backend,
            "inputs": inputs,
            "outputs": outputs,
        }

    async def model_ready(self, name: str, version: str = "") -> bool:
        """True when the version (or, without one, any version) is READY.

        Raises:
            ModelNotFound: the model is unknown to the server.
        """
        if name not in self._models:
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        try:
            self._resolve(name, version)
        except (ModelNotFound, ModelNotReady):
            return False
        return True

    async def model_config(self, name: str, version: str = "") -> ModelConfig:
        """The normalized model config of a READY version (as Triton's ``/config`` returns).

        Raises:
            ModelNotFound / ModelNotReady: unknown model or version, or none ready.
        """
        return self._resolve(name, version).config

    # ----------------------------------------------------------------- inference
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one inference request.

        Inputs are numpy arrays whose shapes include the batch dimension when the model's
        ``max_batch_size > 0``; outputs come back the same way, in requested order.
        Inputs and requested outputs whose parameters name a ``shared_memory_region`` are
        read from / written into that registered region (Triton's shared-memory extension).
        A request continuing a sequence that started before a reload of its model runs on
        the version holding that sequence's state (:mod:`workbench.engine.retiring`).

        Raises:
            ServerNotReady: the server is stopping.
            ModelNotFound: unknown model/version (HTTP 404).
            ModelNotReady: the version is not READY (HTTP 503).
            InvalidArgument: the request does not match the model config (Triton's texts).
            NotFound / InvalidArgument: a shared-memory input or output names an unknown
                region, lies outside it, the output region is too small, or its client
                truncated it (``workbench.engine.shared_memory_io``).
            DecoupledNotSupported: a decoupled model did not send exactly one response (use
                :meth:`infer_stream` for those).
            WorkbenchError: the backend failed to execute the request.
        """
        arrival = time.monotonic_ns()
        if self._stopping:
            raise ServerNotReady("Server not ready")
        model = self._resolve_request(request)
        infer = model.infer_once if model.decoupled else model.infer  # one await less per request
        if not uses_shared_memory(request):
            return await infer(request, arrival)
        async with AttachedRequest(self._shared_memory, request) as attached:
            response = await infer(attached.request, arrival)
            await attached.write_outputs(response)
            return response

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Every response to ``request``, as gRPC's ``ModelStreamInfer`` delivers them.

        A non-decoupled model yields exactly one response. A decoupled model
        (``model_transaction_policy { decoupled: true }``) yields 0..n responses as it sends
        them; the last has ``final=True``, and a final response without outputs means the model
        closed the request without one (Triton's empty final response). Shared-memory outputs
        are written into their region for each response. Close the iterator (``aclosing``) to
        cancel the request.

        Raises:
            The errors of :meth:`infer`, from the first ``__anext__``; a backend's error response
            is raised where it arrives and ends the iteration.
        """
        arrival = time.monotonic_ns()
        if self._stopping:
            raise ServerNotReady("Server not ready")
        model = self._resolve_request(request)
        if not uses_shared_memory(request):
            async for response in model.infer_stream(request, arrival):
                yield response
            return
        async with AttachedRequest(self._shared_memory, request) as attached:
            async for response in model.infer_stream(attached.request, arrival):
                if response.outputs:
                    await attached.write_outputs(response)
                yield response

    async def _infer_step(
        self,
        request: InferenceRequest,
        compute_totals: ComputeTotals,
        adapt: StepAdapt | None = None,
    ) -> InferenceResponse:
        """One step of an ensemble request (the ensemble scheduler's ``step_infer``).

        :meth:`infer` for a composing model, resolved by name and version for each request,
        minus the checks that concern clients (server stopping: the ensemble request already
        in flight finishes; shared memory: steps carry arrays). What runs is
        ``adapt(config of the resolved version)`` when ``adapt`` is given (the scheduler
        fits the batch dimension to that config), else ``request``. Adds the request's
        compute durations to ``compute_totals`` on success.

        Raises:
            ModelNotFound / ModelNotReady: the composing model or version is not READY
                ("Request for unknown model: ...").
            WorkbenchError: as :meth:`infer`.
        """
        arrival = time.monotonic_ns()
        model = self._resolve_request(request)
        if adapt is not None:
            request = adapt(model.config)
        return await model.infer_once(request, arrival, compute_totals)

    def _resolve_request(self, request: InferenceRequest) -> LoadedModel:
        """The version that runs ``request``: the retiring version holding the live
        sequence it continues, if any (:mod:`workbench.engine.retiring`), else as
        :meth:`_resolve` finds it. A sequence started again (START) after the reload lives
        on a serving version: its requests go there, the old one is released idle."""
        if self._retiring:
            held = self._retiring.holder(request)
            if held is not None and not self._serving_holds(request):
                return held
        return self._resolve(request.model_name, request.model_version)

    def _serving_holds(self, request: InferenceRequest) -> bool:
        entry = self._models.get(request.model_name)
        corr = request.parameters["sequence_id"]
        return entry is not None and any(
            state.state is ModelReadyState.READY and state.model is not None
            and state.model.holds_sequence(corr)
            for state in entry.versions.values()
        )

    def _resolve(self, name: str, version: str) -> LoadedModel:
        entry = self._models.get(name)
        if entry is None:
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        if version in ("", "-1"):
            if entry.latest_ready is None:
                raise ModelNotFound(f"Request for unknown model: '{name}' has no available versions")
            return entry.latest_ready
        try:
            state = entry.versions.get(int(version))
        except ValueError:
            state = None
        if state is None:
            raise ModelNotFound(f"Request for unknown model: '{name}' version {version} is not found")
        if state.state is not ModelReadyState.READY or state.model is None:
            raise ModelNotReady(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return state.model

    # ----------------------------------------------------------------- statistics
    async def statistics(self, name: str = "", version: str = "") -> dict:
        """Triton's statistics extension: ``{"model_stats": [...]}`` for READY versions.

        Durations are cumulative nanoseconds; ``last_inference`` is ms since the epoch.

        Raises:
            InvalidArgument: unknown model, or a version that is not available.
        """
        if not name:
            models = [
                s.model for e in self._models.values() for s in e.versions.values() if s.model
            ]
        else:
            entry = self._models.get(name)
            if entry is None or not entry.ready_versions():
                raise InvalidArgument(f"requested model '{name}' is not available")
            models = [entry.versions[v].model for v in entry.ready_versions()]
            if version not in ("", "-1"):
                models = [m for m in models if m.version_str == version]
                if not models:
                    raise InvalidArgument(
                        f"requested model version is not available for model '{name}'"
                    )
        return {"model_stats": [m.statistics.snapshot() for m in models if m is not None]}

    def model_statistics(self) -> list[ModelStatistics]:
        """The live statistics objects of every READY version, by model name then version.

        Synchronous and cheap (no copy): for scrapers such as the Prometheus frontend, which
        read them on the event loop (the thread that records them). The counters are the
        ones :meth:`statistics` reports (cumulative nanoseconds), plus ``load_ns``,
        ``cache_enabled``, ``pending`` (queued requests) and ``failures`` by reason.
        """
        return [
            state.model.statistics
            for name in sorted(self._models)
            for _, state in sorted(self._models[name].versions.items())
            if state.state is ModelReadyState.READY and state.model is not None
        ]

    def add_success_observer(self, observer: SuccessObserver) -> None:
        """Call ``observer(statistics, request_ns, queue_ns, input_ns, infer_ns, output_ns)``
        after every successful request of every model version, loaded now or later.

        Observers run on the event loop inside the recording call: keep them O(1). They see
        the same durations the counters add (nanoseconds), so nothing is counted twice.
        """
        self._observers.append(observer)

    def remove_success_observer(self, observer: SuccessObserver) -> None:
        """Stop calling ``observer`` (added by :meth:`add_success_observer`); a no-op when it
        is not registered. Takes effect for every model version at once."""
        if observer in self._observers:
            self._observers.remove(observer)



def _rate_limiter(options: ServerOptions) -> RateLimiter | None:
    """The shared rate limiter for ``--rate-limit=execution_count`` (None when off).

    Raises:
        InvalidArgument: a malformed ``--rate-limit-resource``.
    """
    if options.rate_limit == "off":
        return None
    try:
        return RateLimiter(dict(parse_resource(text) for text in options.rate_limit_resource))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


__all__ = ["Server", "EXTENSIONS"]
