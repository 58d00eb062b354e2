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
from workbench.config.model_config import model_config_from_json
from workbench.config.normalize import is_ensemble
from workbench.config.validate_ensemble import composing_models
from workbench.engine.ensembles import (
    declared_dependencies,
    ensemble_error,
    load_waves,
    stop_waves,
)
from workbench.engine.loader import LoadResult, load_model
from workbench.engine.model import LoadedModel
from workbench.engine.poller import RepositoryPoller
from workbench.engine.registry import ModelEntry, VersionState, drain_versions
from workbench.engine.response_cache import ResponseCache
from workbench.engine.shared_memory import SharedMemoryRegistry
from workbench.engine.shared_memory_api import SharedMemoryAPI
from workbench.engine.shared_memory_io import AttachedRequest, uses_shared_memory
from workbench.engine.settings import LogSettings, TraceSettings
from workbench.engine.settings_api import SettingsAPI
from workbench.engine.switching import switch_entry
from workbench.errors import (
    InvalidArgument,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    ServerNotReady,
    Unavailable,
)
from workbench.options import ServerOptions
from workbench.repository.overrides import OverrideDirectory, OverrideStore
from workbench.repository.remote import RemoteRepository, resolve_repositories
from workbench.repository.repository import ModelLocation, ModelRepository
from workbench.scheduling.ensemble import StepInfer
from workbench.scheduling.factory import make_scheduler
from workbench.scheduling.rate_limiter import RateLimiter, parse_resource
from workbench.statistics import ComputeTotals, ModelStatistics, SuccessObserver
from workbench.types import InferenceRequest, InferenceResponse, ModelReadyState

log = logging.getLogger(__name__)

#: Triton protocol extensions this server implements (``GET /v2`` lists them).
EXTENSIONS = [
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "system_shared_memory",
    "cuda_shared_memory",
    "classification",
    "logging",
    "trace",
]


class Server(SharedMemoryAPI, SettingsAPI):
    """The inference engine: model repository, model lifecycle, inference, statistics.

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
            log.error("failed to load '%s': %s", entry.name, _entry_reason(entry))
        if failed and self.options.exit_on_error:
            reasons = "; ".join(f"'{e.name}': {_entry_reason(e)}" for e in failed)
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
        finish before the serving ones stop."""
        self._stopping = True
        if self._poller is not None:
            await self._poller.stop()
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

        Raises:
            ServerNotReady: the server is stopping.
            ModelNotFound: unknown model/version (HTTP 404).
            ModelNotReady: the version is not READY (HTTP 503).
            InvalidArgument: the request does not match the model config (Triton's texts).
            NotFound / InvalidArgument / InternalError: a shared-memory input or output names
                an unknown region, lies outside it, or the output region is too small
                (``workbench.engine.shared_memory_io``).
            DecoupledNotSupported: a decoupled model did not send exactly one response (use
                :meth:`infer_stream` for those).
            WorkbenchError: the backend failed to execute the request.
        """
        arrival = time.monotonic_ns()
        if self._stopping:
            raise ServerNotReady("Server not ready")
        model = self._resolve(request.model_name, request.model_version)
        if not uses_shared_memory(request):
            return await model.infer_once(request, arrival)
        with AttachedRequest(self._shared_memory, request) as attached:
            response = await model.infer_once(attached.request, arrival)
            attached.write_outputs(response)
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
        model = self._resolve(request.model_name, request.model_version)
        if not uses_shared_memory(request):
            async for response in model.infer_stream(request, arrival):
                yield response
            return
        with AttachedRequest(self._shared_memory, request) as attached:
            async for response in model.infer_stream(attached.request, arrival):
                if response.outputs:
                    attached.write_outputs(response)
                yield response

    async def _infer_step(
        self, request: InferenceRequest, compute_totals: ComputeTotals
    ) -> InferenceResponse:
        """One step of an ensemble request (the ensemble scheduler's ``step_infer``).

        :meth:`infer` for a composing model, resolved by name and version for each request,
        minus the checks that concern clients (server stopping: the ensemble request already
        in flight finishes; shared memory: steps carry arrays). Adds the request's compute
        durations to ``compute_totals`` on success.

        Raises:
            ModelNotFound / ModelNotReady: the composing model or version is not READY
                ("Request for unknown model: ...").
            WorkbenchError: as :meth:`infer`.
        """
        arrival = time.monotonic_ns()
        model = self._resolve(request.model_name, request.model_version)
        return await model.infer_once(request, arrival, compute_totals)

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

    # ----------------------------------------------------------------- repository API
    async def repository_index(self, ready: bool = False) -> list[dict]:
        """Every model in the repositories, and every version the server knows, with state.

        Rows are ``{"name", "version", "state", "reason"}``; a model never loaded has only
        ``name``; ``reason`` only when non-empty (Triton's repository index). States are
        Triton's: ``READY``; ``LOADING`` for a version being loaded that does not serve yet
        (a model whose config is still being read has one row without version); a version
        being reloaded keeps serving and stays ``READY``; ``UNLOADING`` while a version
        drains (unload, or a version removed by a reload); ``UNAVAILABLE`` with the load
        error, or "unloaded". When the latest reload of a model failed and its previous
        versions kept serving, their ``READY`` rows carry that failure as ``reason``.
        """
        assert self._repository is not None
        found = await asyncio.to_thread(self._repository.scan)
        rows = []
        for name in sorted(set(found) | set(self._models) | set(self._loading)):
            entry = self._models.get(name)
            rows.extend(_index_rows(name, entry, self._loading.get(name)))
        if ready:
            rows = [r for r in rows if r.get("state") == "READY"]
        return rows

    async def load_model(
        self, name: str, config: str | dict | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name`` (explicit mode); ``config`` (JSON) overrides config.pbtxt.

        ``files`` (Triton's ``file:<version>/<name>`` load parameters, without the ``file:``
        prefix: path relative to the model folder -> contents) make the model load from a
        temporary folder holding only those files and ``config`` (which is then required),
        not from the repository, which stays untouched; the folder is removed when the model
        is unloaded or reloaded and at :meth:`stop` (:mod:`workbench.repository.overrides`
        has the path rules). A model need not be in a repository to load this way.

        A reload loads the new versions beside the old ones, switches traffic when they are
        ready, then drains and unloads the old ones: no request is dropped. A reload that
        fails leaves the previously loaded versions serving. An ensemble's composing models
        (ensembles of ensembles included) that are not READY are loaded first (Triton);
        READY ones are left as they are.

        The load runs on the model-load threads (``model_load_thread_count``): the event
        loop, health checks and the other models keep serving meanwhile; the repository
        index shows the versions that do not serve yet as LOADING. Traffic moves to the new
        versions as soon as they are ready; this returns once the old ones have drained and
        unloaded (meanwhile UNLOADING in the index when the new load no longer has their
        version). A failed reload leaves the old versions serving with the failure as the
        reason of their READY rows in the index.

        Raises:
            Unavailable: the server is not in explicit model control mode ("explicit model
                load / unload is not allowed if polling is enabled", Triton's text).
            InvalidArgument: the model is not in any repository, or failed to load (reason;
                for an ensemble, e.g. "ensemble 'e' depends on 'm' which has no loaded
                version. ..." or a step mapping error, see :mod:`workbench.engine.ensembles`);
                ``files`` without ``config`` ("failed to load 'm', failed to poll from model
                repository: Load parameter 'config' must be specified for model file
                override") or with an invalid path ("...: Invalid file parameter
                'file:../x': ..."): nothing is loaded or written then.
            InvalidModelConfig: ``config`` is not a JSON model config.
        """
        self._require_explicit()
        override = model_config_from_json(config) if config else None
        directory = await self._override_directory(name, override, files)
        if directory is None and self._remotes:
            await asyncio.to_thread(self._sync_remotes, name)
        self._explicit.add(name)
        entries = await self._load_models(
            [name], {name: override} if override else None, {name: directory} if directory else None
        )
        await self._drained(name)
        entry = entries[name]
        if entry.failed() or not entry.ready_versions():
            raise InvalidArgument(f"load failed for model '{name}': {_entry_reason(entry)}")

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload every version of ``name`` after its in-flight requests finish.

        With ``unload_dependents`` an ensemble's composing models are unloaded too (and
        theirs, for ensembles of ensembles), as Triton does: except those loaded by name
        (start-up list or load API) and those another loaded ensemble still calls. Without
        it they stay loaded. Unloading a composing model leaves its ensembles loaded: their
        requests then fail with "Request for unknown model: ..." until it is loaded again.

        Raises:
            Unavailable: the server is not in explicit model control mode.
            InvalidArgument: the model is unknown.
        """
        self._require_explicit()
        await self._unload(name, unload_dependents)

    async def _unload(self, name: str, unload_dependents: bool) -> None:
        async with self._lock(name):
            entry = self._models.get(name)
            if entry is None:
                assert self._repository is not None
                if await asyncio.to_thread(self._repository.locate, name) is None:
                    raise InvalidArgument(
                        f"failed to unload '{name}', no such model in the repository"
                    )
                return
            await entry.stop("unloaded")
            entry.reason = "unloaded" if not entry.versions else ""
        composing = self._dependencies.pop(name, ())
        self._explicit.discard(name)
        if not unload_dependents:
            return
        for model in composing:
            still_used = any(
                model in calls and self._models.get(other) is not None
                and self._models[other].ready_versions()
                for other, calls in self._dependencies.items()
            )
            if model not in self._explicit and not still_used and model in self._models:
                await self._unload(model, unload_dependents=True)

    async def poll_repository(self) -> None:
        """Rescan the repositories now and apply what changed (``poll`` mode; Triton's
        ``TRITONSERVER_ServerPollModelRepository``). The periodic poll calls the same; one
        poll runs at a time. See :class:`~workbench.engine.poller.RepositoryPoller`.

        Raises:
            Unavailable: the server is not in ``poll`` mode ("polling is disabled").
        """
        if self._poller is None:
            raise Unavailable("polling is disabled")
        await self._poller.poll()

    def _sync_remotes(self, name: str | None = None) -> None:
        """Blocking: bring the local mirrors of the remote repositories up to date (only
        ``name``'s folder when given).

        Raises:
            InvalidArgument: a remote repository could not be read (name given: as Triton's
                "failed to load '<m>', failed to poll from model repository: ...").
        """
        errors = []
        for remote in self._remotes:  # one unreachable repository does not stop the others
            try:
                remote.sync(name)
            except InvalidArgument as exc:
                errors.append(exc.message)
        if errors and name is None:
            raise InvalidArgument("; ".join(errors))
        if errors:
            raise InvalidArgument(
                f"failed to load '{name}', failed to poll from model repository: {'; '.join(errors)}"
            )

    async def _remove_model(self, name: str) -> None:
        """A model folder left the repository (poll mode): drain and unload every version,
        then forget the model (the repository index no longer lists it, as Triton's)."""
        if name in self._models:
            await self._unload(name, unload_dependents=False)
            entry = self._models.get(name)
            if entry is not None and not entry.ready_versions():
                del self._models[name]

    async def _override_directory(
        self, name: str, override: ModelConfig | None, files: dict[str, bytes] | None
    ) -> OverrideDirectory | None:
        """The temporary model folder for a load with ``files`` (None without files).

        Raises:
            InvalidArgument: no ``config`` override, or an invalid file path (Triton's
                "failed to load 'm', failed to poll from model repository" first).
        """
        if not files:
            return None
        try:
            if override is None:
                raise InvalidArgument("Load parameter 'config' must be specified for model file override")
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._load_executor, self._overrides.create, name, override, files
            )
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"failed to load '{name}', failed to poll from model repository: {exc.message}"
            ) from None

    def _require_explicit(self) -> None:
        if self.options.model_control_mode != "explicit":
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _load_models(
        self,
        names: list[str],
        overrides: dict[str, ModelConfig] | None = None,
        directories: dict[str, OverrideDirectory] | None = None,
        keep: dict[str, frozenset[int]] | None = None,
    ) -> dict[str, ModelEntry]:
        """Load ``names`` and the composing models of the ensembles among them that are not
        READY yet, non-ensembles first, then each ensemble once the models it calls are
        loaded (:func:`workbench.engine.ensembles.load_waves`). Returns every entry loaded.
        A model in ``directories`` loads from that folder instead of the repository.

        ``keep``: per model, versions whose files did not change (poll mode): those that are
        READY keep serving as they are instead of loading again.

        Raises:
            InvalidArgument: a model is in no repository (and has no override config).
        """
        overrides = overrides or {}
        directories = directories or {}
        keep = keep or {}
        ready = {n for n, e in self._models.items() if e.latest_ready is not None}
        planned = await asyncio.to_thread(self._plan_dependencies, names, overrides, ready)
        self._dependencies.update(planned)
        entries: dict[str, ModelEntry] = {}
        for wave in load_waves(planned):
            loaded = await asyncio.gather(
                *(self._load(n, overrides.get(n), directories.get(n), keep.get(n, frozenset()))
                  for n in wave)
            )
            entries.update(zip(wave, loaded, strict=True))
        return entries

    def _plan_dependencies(
        self, names: list[str], overrides: dict[str, ModelConfig], ready: set[str]
    ) -> dict[str, tuple[str, ...]]:
        """Blocking: ``names`` plus the composing models to load with them (those in a
        repository and not in ``ready``), each with the models its config's steps call."""
        assert self._repository is not None
        found = self._repository.scan()
        planned: dict[str, tuple[str, ...]] = {}
        queue = list(names)
        while queue:
            name = queue.pop(0)
            if name in planned:
                continue
            location = found.get(name)
            path = location.path if location is not None and not location.error else None
            planned[name] = tuple(declared_dependencies(path, overrides.get(name)))
            queue.extend(m for m in planned[name] if m in found and m not in ready)
        return planned

    async def _load(
        self,
        name: str,
        override: ModelConfig | None,
        directory: OverrideDirectory | None = None,
        keep: frozenset[int] = frozenset(),
    ) -> ModelEntry:
        """(Re)load ``name`` from its repository folder, or from ``directory`` (file
        overrides; the entry then owns it, and it is removed at once when nothing was
        loaded), beside what serves, then switch (:mod:`workbench.engine.switching`).

        The versions of ``keep`` that are READY now are not loaded again: they move to the
        new entry as they are. Returns the new entry, also when the switch kept the old one.
        """
        try:
            entry = await self._load_entry(name, override, directory, keep)
        except BaseException:
            if directory is not None:
                await asyncio.to_thread(directory.remove)
            raise
        if directory is not None and not entry.holds_instances():
            await asyncio.to_thread(entry.release_directory)
        return entry

    async def _load_entry(
        self,
        name: str,
        override: ModelConfig | None,
        directory: OverrideDirectory | None,
        keep: frozenset[int],
    ) -> ModelEntry:
        assert self._repository is not None
        async with self._lock(name):
            if directory is not None:
                location: ModelLocation | None = ModelLocation(name, directory.path)
            else:
                location = await asyncio.to_thread(self._repository.locate, name)
            if location is None and override is None:
                raise InvalidArgument(f"failed to load '{name}', failed to poll from model repository")
            old = self._models.get(name)
            reuse = {v: old.versions[v] for v in keep if old is not None and v in old.ready_versions()}
            if location is not None and location.error:
                entry = ModelEntry(name, reason=location.error)
            else:
                path = location.path if location is not None else None
                result = await self._run_load(name, path, override, frozenset(reuse))
                entry = self._entry_for(result, reuse)
            entry.directory = directory
            if self._stopping:  # stop() began during the load: never serve it
                fresh = [(v, s) for v, s in entry.versions.items() if v not in reuse]
                await drain_versions(name, fresh)
                return entry
            switch = switch_entry(self._models, old, entry, reuse)
            if switch.kept_old:  # a failed reload keeps the last good versions serving
                assert old is not None
                await drain_versions(name, switch.drain)  # never served: nothing in flight
                if old.config is not None:
                    self._dependencies[name] = tuple(composing_models(old.config))
                log.error("failed to reload '%s', the loaded versions keep serving: %s",
                          name, old.load_error)
                return entry
            if reuse and old is not None and entry.directory is None:
                entry.directory, old.directory = old.directory, None  # versions moved with it
        self._drain_later(name, switch.drain, old)
        return entry

    async def _run_load(
        self, name: str, path, override: ModelConfig | None, keep: frozenset[int]
    ) -> LoadResult:
        """:func:`~workbench.engine.loader.load_model` on a model-load thread, with the model
        listed as loading (``self._loading``) meanwhile."""
        loop = asyncio.get_running_loop()
        self._loading[name] = []

        def loading(versions: list[int]) -> None:  # on the event loop
            if name in self._loading:
                self._loading[name] = versions

        def on_versions(versions: list[int]) -> None:  # on the load thread
            loop.call_soon_threadsafe(loading, list(versions))

        try:
            return await loop.run_in_executor(
                self._load_executor, load_model, name, path, self.options, override,
                self._backend_context, keep, on_versions,
            )
        finally:
            self._loading.pop(name, None)

    def _drain_later(
        self, name: str, states: list[tuple[int, VersionState]], old: ModelEntry | None
    ) -> None:
        """Drain and unload ``states`` (out of service already) in a background task, then
        delete ``old``'s override folder, if any; :meth:`stop` and :meth:`load_model` wait
        for it (:meth:`_drained`), a poll does not."""
        if not states and (old is None or old.directory is None):
            return

        async def drain() -> None:
            # a request resolved to these versions just before the switch may still be on
            # its way to their queue (a decoupled request's enqueue task): let it get there
            await asyncio.sleep(0)
            await drain_versions(name, states)
            if old is not None and old.directory is not None:
                await asyncio.to_thread(old.release_directory)

        task = asyncio.ensure_future(drain())
        tasks = self._drains.setdefault(name, set())
        tasks.add(task)

        def done(_: asyncio.Task) -> None:
            tasks.discard(task)
            if not tasks and self._drains.get(name) is tasks:
                del self._drains[name]

        task.add_done_callback(done)

    async def _drained(self, *names: str) -> None:
        """Wait until the background drains of ``names`` (started so far) have finished."""
        tasks = [t for n in names for t in self._drains.get(n, ())]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _entry_for(self, result: LoadResult, reuse: dict[int, VersionState] | None = None) -> ModelEntry:
        """The entry of a finished load (plus the ``reuse`` versions it kept); an ensemble
        is first checked against its composing models as loaded now, and is UNAVAILABLE with
        the reason when that fails."""
        config = result.config
        if config is not None and not result.error and is_ensemble(config):
            self._dependencies[result.name] = tuple(composing_models(config))
            reason = ensemble_error(config, self._models, self._dependencies)
            if reason:
                return ModelEntry(result.name, config=config, reason=reason)
        return _entry_from_result(
            result, self._observers, self._cache, self._rate_limiter, self._infer_step, reuse
        )


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


def _entry_from_result(
    result: LoadResult,
    observers: list[SuccessObserver],
    cache: ResponseCache | None,
    rate_limiter: RateLimiter | None,
    step_infer: StepInfer,
    reuse: dict[int, VersionState] | None = None,
) -> ModelEntry:
    """Wrap loaded instances in schedulers (on the event loop) and record version states.

    ``observers`` is the server's shared observer list, handed to every version's statistics;
    ``step_infer`` is how an ensemble's scheduler reaches its composing models; ``reuse``:
    serving versions the load kept (not loaded again), added as they are when still chosen.
    """
    entry = ModelEntry(result.name, config=result.config, reason=result.error)
    if result.config is not None and result.config.response_cache.enable and cache is None:
        log.warning("model '%s' enables the response cache but the server has none "
                    "(--cache-config local,size=N): responses are not cached", result.name)
    for version, loaded in result.versions.items():
        if loaded.error:
            entry.versions[version] = VersionState(ModelReadyState.UNAVAILABLE, loaded.error)
            continue
        stats = ModelStatistics(
            result.name,
            str(version),
            load_ns=loaded.load_ns,
            cache_enabled=result.config.response_cache.enable and cache is not None,
            observers=observers,
            memory_usage=loaded.memory,
        )
        scheduler = make_scheduler(result.config, loaded.instances, stats, rate_limiter, step_infer)
        model = LoadedModel(result.config, version, scheduler, stats, cache, result.labels)
        entry.versions[version] = VersionState(ModelReadyState.READY, "", model)
        log.info("successfully loaded '%s' version %d", result.name, version)
    for version in result.chosen:
        if reuse and version in reuse and version not in entry.versions:
            entry.versions[version] = reuse[version]
    entry.refresh()
    return entry


def _entry_reason(entry: ModelEntry) -> str:
    return entry.failure_reason()


def _index_rows(name: str, entry: ModelEntry | None, loading: list[int] | None) -> list[dict]:
    """The repository index rows of one model (see :meth:`Server.repository_index`);
    ``loading``: the versions its load in progress loads ([] while its config is read),
    None when it is not loading."""
    states: dict[int, tuple[str, str]] = {}
    if entry is not None:
        for version, state in entry.versions.items():
            ready = state.state is ModelReadyState.READY
            reason = entry.load_error if ready else state.reason
            states[version] = (state.state.value, reason)
    if loading is not None:
        serving = [v for v, (state, _) in states.items() if state == "READY"]
        if not loading and not serving:
            return [{"name": name, "state": ModelReadyState.LOADING.value}]
        for version in loading:
            if version not in serving:
                states[version] = (ModelReadyState.LOADING.value, "")
    if entry is None and not states:
        return [{"name": name}]
    if not states:
        row = {"name": name, "state": "UNAVAILABLE"}
        if entry is not None and entry.reason:
            row["reason"] = entry.reason
        return [row]
    rows = []
    for version, (state, reason) in sorted(states.items()):
        row = {"name": name, "version": str(version), "state": state}
        if reason:
            row["reason"] = reason
        rows.append(row)
    return rows


__all__ = ["Server", "EXTENSIONS"]
