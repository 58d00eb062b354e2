"""``Server``: the engine's single public object; every frontend calls its async methods.

Usage::

    async with Server(ServerOptions(model_repository=["models"])) as server:
        response = await server.infer(request)

The server owns every model, scheduler, thread and task it starts; ``stop()``
lets queued and executing requests finish before unloading. It is a facade: which models
load and when is :class:`~workbench.engine.manager.repository_manager.RepositoryManager`'s
(``server.repository_manager``: the repositories, the load / unload API, the index, the
poll), how each model's versions load, serve, drain and unload is
:class:`~workbench.engine.models.lifecycle.ModelLifecycle`'s (``server.lifecycle``, whose read API
tests and tools use); the shared-memory and settings extensions and config file
editing are services the frontends call directly: ``server.shared_memory``
(:mod:`~workbench.engine.shm.service`), ``server.settings``
(:mod:`~workbench.engine.api.settings_service`), ``server.config_files``
(:mod:`~workbench.engine.manager.config_files`) and ``server.rollouts``
(:mod:`~workbench.engine.rollout.rollouts`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendContext
from workbench.common.errors import (
    InvalidArgument,
    ModelLoadError,
    ServerNotReady,
    Unavailable,
    Unsupported,
    WorkbenchError,
)
from workbench.common.results import ModelMetadata, ModelStatisticsReport, RepositoryIndexRow, ServerMetadata
from workbench.engine.api.metadata import EXTENSIONS, model_metadata, server_metadata
from workbench.engine.api.settings_service import SettingsService
from workbench.engine.api.statistics_report import live_statistics, statistics_report
from workbench.engine.manager.config_files import ConfigFileService
from workbench.engine.manager.poller import RepositoryPoller
from workbench.engine.manager.repository_manager import RepositoryManager
from workbench.engine.models.lifecycle import ModelLifecycle, entry_reason
from workbench.engine.rollout.rollouts import RolloutService
from workbench.engine.shm.service import SharedMemoryService
from workbench.engine.shm.shared_memory import SharedMemoryRegistry
from workbench.engine.shm.shared_memory_io import AttachedRequest, uses_shared_memory
from workbench.messages.types import InferenceRequest, InferenceResponse
from workbench.startup.options import ServerOptions
from workbench.stats.custom_metrics import CustomMetrics
from workbench.stats.statistics import ModelStatistics, SuccessObserver

log = logging.getLogger(__name__)


class Server:
    """The inference engine: a facade over the repository manager and the model lifecycle,
    the shared-memory registry, the settings and the config-file service; inference and
    statistics read the lifecycle.

    Args:
        options: server options (model repositories, control mode, ...).

    Attributes:
        lifecycle: the models' versions (:class:`~workbench.engine.models.lifecycle.ModelLifecycle`);
            its read API (``models``, ``entry``, ``version_states``, ``retiring``) is public.
        repository_manager: which models load and when
            (:class:`~workbench.engine.manager.repository_manager.RepositoryManager`, over
            ``lifecycle``); its read API (``repository``, ``remotes``, ``overrides``) is public.
        shared_memory: Triton's system and CUDA shared-memory extensions
            (:class:`~workbench.engine.shm.service.SharedMemoryService`): register,
            unregister and status of the regions that inference reads inputs from and writes
            outputs into.
        settings: Triton's logging and trace extensions
            (:class:`~workbench.engine.api.settings_service.SettingsService`): the log and trace
            settings, read and updated at runtime, and the log-settings observers.
        config_files: the models' config files on disk
            (:class:`~workbench.engine.manager.config_files.ConfigFileService`): read, validate,
            write (atomic, with a backup), revert, and apply as the control mode allows.
        rollouts: rollouts inside the server, a product extension
            (:class:`~workbench.engine.rollout.rollouts.RolloutService`): a weighted (optionally
            sticky) split of unversioned requests between versions, a mirror of a share of
            them on a candidate with its agreement report, promote and rollback.
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.lifecycle = ModelLifecycle(options)
        self.repository_manager = RepositoryManager(options, self.lifecycle)
        self._poller: RepositoryPoller | None = None
        self._live = False
        self._regions = SharedMemoryRegistry(options.allow_client_shm)
        self.shared_memory = SharedMemoryService(self._regions)
        self.settings = SettingsService(options, self.lifecycle.is_ready)
        #: which requests the frontends trace (``--trace-config``, the trace extension)
        self.tracer = self.settings.tracer
        self.config_files = ConfigFileService(self.repository_manager, self.poll_repository)
        self.rollouts = RolloutService(self.lifecycle, self.config_files)
        #: Python models' ``pb_utils.MetricFamily`` families, scraped on ``/metrics``
        self.custom_metrics = CustomMetrics()

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the repositories (remote ones synced into their mirrors first, see
        :mod:`workbench.repository.remote`) and load the start-up models (all in ``none`` and
        ``poll`` mode, the ``load_model`` list in ``explicit`` mode); in ``poll`` mode then
        rescan every ``repository_poll_secs`` seconds (:meth:`poll_repository`).

        As tritonserver: a model that fails to load is UNAVAILABLE with its reason and the
        others serve; with ``exit_on_error`` (tritonserver's default) any such failure
        stops the server instead and raises. A model repository that does not exist
        without ``exit_on_error``: the error is logged and the server keeps running, not
        live and not ready, with no model loaded (Triton's SERVER_FAILED_TO_INITIALIZE:
        its metadata still answers).

        Raises:
            InvalidArgument: with ``exit_on_error``, a model repository does not exist (a
                remote one: or cannot be read, or its filesystem package is not installed); or
                ``--trace-config mode=opentelemetry`` without the OpenTelemetry SDK.
            ModelLoadError: a model failed to load and ``exit_on_error`` is set ("failed to
                load all models: '<model>': <reason>; ...").
        """
        self.tracer.open()
        manager = self.repository_manager
        try:
            await manager.open(BackendContext(asyncio.get_running_loop(), self.infer_stream,
                                                self.custom_metrics, self.load_model,
                                                self.unload_model, self.model_ready))
        except InvalidArgument as exc:
            if self.options.exit_on_error or not manager.opened:
                raise
            log.error("%s", exc.message)  # Triton: not live, not ready, metadata answers
            return
        if self.options.model_control_mode == "poll":
            self._poller = RepositoryPoller(manager, manager.repository, self.options.repository_poll_secs,
                                            manager.sync_remotes if manager.remotes else None)
            await self._poller.baseline()  # changes made while the start-up models load count
        failed = await manager.load_startup_models()
        self._live = True
        for entry in failed:
            log.error("failed to load '%s': %s", entry.name, entry_reason(entry))
        if failed and self.options.exit_on_error:
            reasons = "; ".join(f"'{e.name}': {entry_reason(e)}" for e in failed)
            await self.stop()  # marks every version "unloaded": the reasons are read first
            raise ModelLoadError(f"failed to load all models: {reasons}")
        if self._poller is not None:
            self._poller.start()

    async def stop(self) -> None:
        """Refuse new requests, drain in-flight ones, unload every model
        (:meth:`RepositoryManager.stop`: ensembles before the models they call). Idempotent.
        In ``poll`` mode polling stops first (a poll under way finishes; what it loads after
        this call is unloaded again at once)."""
        self.lifecycle.begin_stop()
        if self._poller is not None:
            await self._poller.stop()
        await self.rollouts.close()
        await self.repository_manager.stop()
        self._regions.close()
        self.tracer.close()
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
        if not self._live or self.lifecycle.stopping:
            return False
        return not self.options.strict_readiness or not self.lifecycle.any_failed()

    async def metadata(self) -> ServerMetadata:
        """``GET /v2``: ``{"name", "version", "extensions"}`` (:mod:`~workbench.engine.api.metadata`)."""
        return server_metadata(self.options.server_id)

    async def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        """``GET /v2/models/<m>[/versions/<v>]``: name, versions, platform, inputs, outputs.

        Raises:
            ModelNotFound / ModelNotReady: as :meth:`infer` resolves the model.
        """
        return model_metadata(self.lifecycle, name, version)

    async def model_ready(self, name: str, version: str = "") -> bool:
        """True when the version (or, without one, any version) is READY and each of its
        instances says it is ready (:meth:`~workbench.backends.base.ModelInstance.ready`: a
        Python model whose stub crashed and is not back yet, or whose own ``is_ready()``
        says False, is not); False for a model or version the server does not know or that
        is not READY (unloaded, failed, loading), never an error: Triton's ``ModelIsReady``
        (gRPC ``ready: false`` with OK, HTTP 400 "Model version not ready")."""
        if not self.lifecycle.is_ready(name, version):
            return False
        instances = self.lifecycle.resolve(name, version).instances()  # READY: it resolves
        asking = [i for i in instances if i.checks_readiness]
        if not all(i.ready() for i in instances if not i.checks_readiness):
            return False
        if not asking:
            return True
        return await asyncio.to_thread(lambda: all(i.ready() for i in asking))

    async def model_config(self, name: str, version: str = "") -> ModelConfig:
        """The normalized model config of a READY version (as Triton's ``/config`` returns).

        Raises:
            ModelNotFound / ModelNotReady: unknown model or version, or none ready.
        """
        return self.lifecycle.resolve(name, version).config

    # ----------------------------------------------------------------- inference
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one inference request.

        Inputs are numpy arrays whose shapes include the batch dimension when the model's
        ``max_batch_size > 0``; outputs come back the same way, in requested order.
        Inputs and requested outputs whose parameters name a ``shared_memory_region`` are
        read from / written into that registered region (Triton's shared-memory extension).
        A request continuing a sequence that started before a reload of its model runs on
        the version holding that sequence's state (:mod:`workbench.engine.models.retiring`).

        Raises:
            ServerNotReady: the server is stopping.
            ModelNotFound: unknown model/version (HTTP 404).
            ModelNotReady: the version is not READY (HTTP 503).
            InvalidArgument: the request does not match the model config (Triton's texts).
            NotFound / InvalidArgument: a shared-memory input or output names an unknown
                region, lies outside it, the output region is too small, or its client
                truncated it (``workbench.engine.shm.shared_memory_io``).
            DecoupledNotSupported: a decoupled model did not send exactly one response (use
                :meth:`infer_stream` for those).
            WorkbenchError: the backend failed to execute the request.
        """
        arrival = time.monotonic_ns()
        if self.lifecycle.stopping:
            raise ServerNotReady("Server not ready")
        model = self.lifecycle.resolve_request(request)
        infer = model.infer_once if model.decoupled else model.infer  # one await less per request
        if not uses_shared_memory(request):
            response = await infer(request, arrival)
            if self.rollouts.mirroring:  # after the answer is built; the copy never delays it
                self.rollouts.offer(request, model, response, arrival)
            return response
        async with AttachedRequest(self._regions, request) as attached:
            response = await infer(attached.request, arrival)
            await attached.write_outputs(response)
            return response

    async def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[InferenceResponse, None]:
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
        if self.lifecycle.stopping:
            raise _refused(ServerNotReady("Server not ready"))
        try:
            model = self.lifecycle.resolve_request(request)
        except WorkbenchError as exc:
            exc.before_execution = True
            raise
        if not uses_shared_memory(request):
            async for response in model.infer_stream(request, arrival):
                yield response
            return
        async with AttachedRequest(self._regions, request) as attached:
            async for response in model.infer_stream(attached.request, arrival):
                if response.outputs:
                    await attached.write_outputs(response)
                yield response

    # ----------------------------------------------------------------- statistics
    async def statistics(self, name: str = "", version: str = "") -> ModelStatisticsReport:
        """Triton's statistics extension: ``{"model_stats": [...]}`` for READY versions.

        Durations are cumulative nanoseconds; ``last_inference`` is ms since the epoch.

        Raises:
            InvalidArgument: unknown model, or a version that is not available.
        """
        return statistics_report(self.lifecycle.models, name, version)

    def model_statistics(self) -> list[ModelStatistics]:
        """The live statistics objects of every READY version, by model name then version.

        Synchronous and cheap (no copy): for scrapers such as the Prometheus frontend, which
        read them on the event loop (the thread that records them). The counters are the
        ones :meth:`statistics` reports (cumulative nanoseconds), plus ``load_ns``,
        ``cache_enabled``, ``pending`` (queued requests) and ``failures`` by reason.
        """
        return live_statistics(self.lifecycle.models)

    def add_success_observer(self, observer: SuccessObserver) -> None:
        """Call ``observer(statistics, request_ns, queue_ns, input_ns, infer_ns, output_ns)``
        after every successful request of every model version, loaded now or later.

        Observers run on the event loop inside the recording call: keep them O(1). They see
        the same durations the counters add (nanoseconds), so nothing is counted twice.
        """
        self.lifecycle.add_success_observer(observer)

    def remove_success_observer(self, observer: SuccessObserver) -> None:
        """Stop calling ``observer`` (added by :meth:`add_success_observer`); a no-op when it
        is not registered. Takes effect for every model version at once."""
        self.lifecycle.remove_success_observer(observer)

    def model_readiness(self) -> list[tuple[str, str, bool]]:
        """``(model, version, ready)`` of every model the server knows (loaded, loading,
        failed or unloaded; a model never loaded is not listed), from the repository index
        rows (:meth:`RepositoryManager.known_rows`): ``version`` is "" for a model that failed
        before any version loaded (an unloaded one keeps its version rows, UNAVAILABLE);
        ``ready`` is true for ``READY`` rows. Synchronous and cheap: for the readiness metric, read on the loop."""
        return [(row["name"], row.get("version", ""), row.get("state") == "READY")
                for row in self.repository_manager.known_rows()]

    def poll_counts(self) -> tuple[int, int] | None:
        """``(polls, failed polls)`` since start in ``poll`` mode (see
        :attr:`RepositoryPoller.polls <workbench.engine.manager.poller.RepositoryPoller.polls>`),
        None in the other modes."""
        if self._poller is None:
            return None
        return self._poller.polls, self._poller.failures

    # ----------------------------------------------------------------- repository API
    async def repository_index(self, ready: bool = False) -> list[RepositoryIndexRow]:
        """Triton's repository index: :meth:`RepositoryManager.index_rows`."""
        return await self.repository_manager.index_rows(ready)

    async def load_model(self, name: str, config: str | dict[str, Any] | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        """Load or hot-reload ``name`` (explicit mode): :meth:`RepositoryManager.load_model`
        (its errors: Unavailable, InvalidArgument, InvalidModelConfig)."""
        await self.repository_manager.load_model(name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (explicit mode): :meth:`RepositoryManager.unload_model`."""
        await self.repository_manager.unload_model(name, unload_dependents)

    async def register_model_repository(self, path: str, name_mapping: dict[str, str] | None = None) -> None:
        """Serve one more local model repository (explicit mode; Triton's
        ``TRITONSERVER_ServerRegisterModelRepository``): its models can be loaded and show in
        the index. ``name_mapping``: a sub-folder -> the model name it is served under.

        Raises:
            Unsupported: not in explicit mode (Triton's text).
            InvalidArgument / AlreadyExists: see
                :meth:`workbench.repository.repository.ModelRepository.register`.
        """
        self._explicit_only("repository registration")
        self.repository_manager.repository.register(path, dict(name_mapping or {}))
        log.info("Model repository registered: %s", path)

    async def unregister_model_repository(self, path: str) -> None:
        """Stop serving a registered repository (explicit mode); its loaded models stay
        loaded, as Triton's.

        Raises:
            Unsupported: not in explicit mode.
            InvalidArgument: not a repository of this server.
        """
        self._explicit_only("repository unregistration")
        self.repository_manager.repository.unregister(path)
        log.info("Model repository unregistered: %s", path)

    def _explicit_only(self, what: str) -> None:
        if self.options.model_control_mode != "explicit":
            raise Unsupported(f"{what} is not allowed if model control mode is not EXPLICIT")

    async def poll_repository(self) -> None:
        """Rescan the repositories now and apply what changed (``poll`` mode; Triton's
        ``TRITONSERVER_ServerPollModelRepository``). The periodic poll calls the same; one
        poll runs at a time. See :class:`~workbench.engine.manager.poller.RepositoryPoller`.

        Raises:
            Unavailable: the server is not in ``poll`` mode ("polling is disabled").
        """
        if self._poller is None:
            raise Unavailable("polling is disabled")
        await self._poller.poll()


__all__ = ["EXTENSIONS", "Server"]


def _refused(error: WorkbenchError) -> WorkbenchError:
    """``error``, marked as refused before any backend saw the request."""
    error.before_execution = True
    return error
