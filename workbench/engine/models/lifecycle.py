"""``ModelLifecycle``: how each model's versions load, switch, drain and unload, and their
states and reasons; Triton's ``ModelLifecycle`` (core ``model_lifecycle.cc``). Which models
load and when (start-up list, load / unload API, poll, ensembles' composing models) is the
repository manager's (:mod:`workbench.engine.manager.repository_manager`), which drives this class
and is never imported here: a load reaches the repositories only through the ``locate``
callback the manager hands to :meth:`ModelLifecycle.load`.

It owns the model entries, their per-model locks, the loads in progress, the background
drains, the versions retiring with live sequences (:mod:`workbench.engine.models.retiring`), the
model-load threads, and the record of what each model's ensemble steps call (the ensemble
check at a load and the stop order read it; the manager plans loads from it). Everything
else reads it through a small API: :meth:`ModelLifecycle.resolve_request` /
:meth:`~ModelLifecycle.resolve` (a request to a loaded model), :meth:`~ModelLifecycle.load` /
:meth:`~ModelLifecycle.unload` (one model, for the manager), :attr:`~ModelLifecycle.models`
(read-only), :meth:`~ModelLifecycle.version_states`, :attr:`~ModelLifecycle.retiring` (live
sequences kept by old versions) and :meth:`~ModelLifecycle.stop`. The
:class:`~workbench.engine.api.server.Server` is a facade over it and the manager; the ensemble
dependency check (:mod:`workbench.engine.manager.dependents`) changes entries through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendContext
from workbench.common.errors import (
    InvalidArgument,
    ModelNotFound,
    ModelNotReady,
)
from workbench.config.normalize import is_ensemble
from workbench.config.validate_ensemble import composing_models
from workbench.engine.inference.model import LoadedModel
from workbench.engine.inference.response_cache import ResponseCache
from workbench.engine.models.ensembles import (
    ensemble_error,
    ensemble_labels,
    stop_waves,
    with_transaction_policy,
)
from workbench.engine.models.entries import continued_metrics, entry_from_result
from workbench.engine.models.instance_update import InstanceUpdate, ServingVersion
from workbench.engine.models.load_threads import LoadThreads
from workbench.engine.models.loader import LoadedVersion, LoadResult, load_model
from workbench.engine.models.registry import ModelEntry, VersionState, drain_versions
from workbench.engine.models.retiring import RetiringVersions
from workbench.engine.models.rollout_split import Split
from workbench.engine.models.switching import switch_entry
from workbench.messages.types import InferenceRequest, InferenceResponse, ModelReadyState
from workbench.repository.overrides import OverrideDirectory
from workbench.repository.repository import ModelLocation
from workbench.scheduling.base import SequenceScheduler
from workbench.scheduling.ensemble import StepAdapt
from workbench.scheduling.rate_limiter import RateLimiter, explicit_pools
from workbench.startup.options import ServerOptions
from workbench.stats.statistics import ComputeTotals, SuccessObserver

log = logging.getLogger(__name__)

#: blocking: the folder of a model in the repositories (None when in none): what a load is
#: given by the repository manager (:meth:`ModelLifecycle.load`)
Locate = Callable[[str], ModelLocation | None]


class ModelLifecycle:
    """The loaded models of one server: their entries, loads, switches, drains and unloads.

    Args:
        options: server options (load threads, cache size, rate limiter, ...).
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self._models: dict[str, ModelEntry] = {}
        #: model -> the models its ensemble steps call (() for other models), for every
        #: model read for loading and not unloaded since
        self._dependencies: dict[str, tuple[str, ...]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: model -> the versions its load in progress loads ([] until its config is read)
        self._loading: dict[str, list[int]] = {}
        #: model -> background drains of its versions that left service (reloads)
        self._drains: dict[str, set[asyncio.Task[None]]] = {}
        #: versions that left service on a reload but still serve their live sequences
        self._retiring = RetiringVersions()
        self._load_threads = LoadThreads(options.model_load_thread_count)
        self._stopping = False
        self._observers: list[SuccessObserver] = []
        size = options.response_cache_byte_size
        self._cache = ResponseCache(size) if size > 0 else None
        self._rate_limiter: RateLimiter | None = None
        self._backend_context: BackendContext | None = None
        #: model -> the weighted split of its rollout (:mod:`workbench.engine.rollout.rollouts` sets
        #: and clears them; read by :meth:`resolve_request`)
        self.splits: dict[str, Split] = {}

    # ----------------------------------------------------------------- read API
    @property
    def models(self) -> Mapping[str, ModelEntry]:
        """Every model the server knows, by name (read-only: change them through this
        object's methods)."""
        return self._models

    @property
    def dependencies(self) -> Mapping[str, tuple[str, ...]]:
        """Model -> the models its ensemble steps call, for every model read for loading and
        not unloaded since (read-only)."""
        return self._dependencies

    @property
    def loading(self) -> Mapping[str, list[int]]:
        """Model -> the versions its load in progress loads ([] until its config is read),
        for the models loading now (read-only)."""
        return self._loading

    @property
    def load_threads(self) -> LoadThreads:
        """The model-load threads (``model_load_thread_count``): loads run there."""
        return self._load_threads

    @property
    def retiring(self) -> RetiringVersions:
        """The versions that left service on a reload but still serve their live sequences."""
        return self._retiring

    @property
    def stopping(self) -> bool:
        """True once :meth:`begin_stop` (or :meth:`stop`) was called."""
        return self._stopping

    def entry(self, name: str) -> ModelEntry | None:
        """The entry of model ``name`` (None when the server does not know it)."""
        return self._models.get(name)

    def is_ready(self, name: str, version: str = "") -> bool:
        """True when ``name`` is known and the version (without one: any) is READY."""
        try:
            self.resolve(name, version)
        except (ModelNotFound, ModelNotReady):
            return False
        return True

    def version_states(self, name: str) -> dict[int, ModelReadyState]:
        """Version -> state of model ``name`` ({} when unknown or without versions)."""
        entry = self._models.get(name)
        return {v: s.state for v, s in sorted(entry.versions.items())} if entry else {}

    def any_failed(self) -> bool:
        """True when some model failed to load (UNAVAILABLE with a reason other than
        "unloaded"): strict readiness reads it. An ensemble that served and was taken out of
        service because a composing model changed (held: ``blocked_versions``, with its
        versions UNAVAILABLE and the reason) does not count: Triton unloads it (reason
        "unloaded"), which its strict readiness ignores; Model Analyzer, for one, reloads
        a composing model before its ensemble and waits for a ready server in between."""
        return any(entry.failed() and not (entry.blocked_versions is not None and entry.versions)
                   for entry in self._models.values())

    def add_success_observer(self, observer: SuccessObserver) -> None:
        """See :meth:`workbench.engine.api.server.Server.add_success_observer`."""
        self._observers.append(observer)

    def remove_success_observer(self, observer: SuccessObserver) -> None:
        """See :meth:`workbench.engine.api.server.Server.remove_success_observer`."""
        if observer in self._observers:
            self._observers.remove(observer)

    # ----------------------------------------------------------------- start & stop
    async def open(self, backend_context: BackendContext) -> None:
        """Set up the rate limiter and the backends' context (no model loads yet).

        Raises:
            InvalidArgument: a malformed ``--rate-limit-resource``.
        """
        self._rate_limiter = _rate_limiter(self.options)
        self._backend_context = backend_context

    def inflight_status(self) -> list[tuple[str, int, int]]:
        """``(model, version, in-flight inferences)`` of each loaded version with some, by name
        and version (Triton's ``ModelRepositoryManager::InflightStatus``, which a stopping
        server logs): requests queued or executing; for a sequence batcher its live sequences,
        as Triton's ``SequenceBatchScheduler::InflightInferenceCount``."""
        status = []
        for name in sorted(self._models):
            for version, state in sorted(self._models[name].versions.items()):
                if state.model is None:
                    continue
                scheduler = state.model.scheduler
                count = (scheduler.live_sequences() if isinstance(scheduler, SequenceScheduler)
                         else scheduler.inflight_count())
                if count:
                    status.append((name, version, count))
        return status

    def begin_stop(self) -> None:
        """Refuse new requests and loads from now on (what loads meanwhile never serves)."""
        self._stopping = True

    async def stop(self) -> None:
        """Drain and unload every model: retiring versions stop waiting for their sequences,
        background drains finish, loads still running on the load threads end (also those
        whose caller stopped waiting), then ensembles stop before the models they call.
        Idempotent."""
        self._stopping = True
        self._retiring.end()
        await self._retiring.finished()
        while self._drains:
            await self.drained(*self._drains)
        await self._load_threads.finish()  # a load whose caller stopped waiting still runs
        for entries in stop_waves(dict(self._models), self._dependencies):
            await asyncio.gather(*(e.stop() for e in entries))

    # ----------------------------------------------------------------- resolving requests
    def resolve_request(self, request: InferenceRequest) -> LoadedModel:
        """The version that runs ``request``: the retiring version holding the live
        sequence it continues, if any (:mod:`workbench.engine.models.retiring`), else for a request
        without a version of a model with a rollout split, the version the split chooses
        (:class:`~workbench.engine.models.rollout_split.Split`), else as :meth:`resolve` finds it.
        A sequence started again (START) after the reload lives on a serving version: its
        requests go there, the old one is released idle.

        Raises:
            ModelNotFound / ModelNotReady: as :meth:`resolve`.
        """
        if self._retiring:
            held = self._retiring.holder(request)
            if held is not None and not self._serving_holds(request):
                return held
        if self.splits and request.model_version in ("", "-1"):
            split = self.splits.get(request.model_name)
            entry = self._models.get(request.model_name)
            if split is not None and entry is not None:
                chosen = split.choose(entry, request)
                if chosen is not None:
                    return chosen
        return self.resolve(request.model_name, request.model_version)

    def _serving_holds(self, request: InferenceRequest) -> bool:
        entry = self._models.get(request.model_name)
        corr = request.parameters["sequence_id"]
        return entry is not None and any(
            state.state is ModelReadyState.READY and state.model is not None
            and state.model.holds_sequence(corr)
            for state in entry.versions.values()
        )

    def resolve(self, name: str, version: str) -> LoadedModel:
        """The READY version ``version`` of ``name`` ("" or "-1": the latest READY one).

        Raises:
            ModelNotFound: unknown model or version, or no READY version (Triton's texts).
            ModelNotReady: the version is known but not READY.
        """
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

    async def _infer_step(
        self,
        request: InferenceRequest,
        compute_totals: ComputeTotals,
        adapt: StepAdapt | None = None,
    ) -> AsyncGenerator[InferenceResponse, None]:
        """One step of an ensemble request (the ensemble scheduler's ``step_infer``): its
        responses, as ``Server.infer_stream`` yields them (0..n for a decoupled model).

        ``Server.infer_stream`` for a composing model, resolved by name and version for each
        request, minus the checks that concern clients (server stopping: the ensemble
        request already in flight finishes; shared memory: steps carry arrays). What runs
        is ``adapt(config of the resolved version)`` when ``adapt`` is given (the scheduler
        fits the batch dimension to that config), else ``request``. Adds the request's
        compute durations to ``compute_totals`` on success.

        Raises:
            ModelNotFound / ModelNotReady: the composing model or version is not READY
                ("Request for unknown model: ...").
            WorkbenchError: as ``Server.infer_stream``.
        """
        arrival = time.monotonic_ns()
        model = self.resolve_request(request)
        if adapt is not None:
            request = adapt(model.config)
        async with contextlib.aclosing(model.infer_stream(request, arrival, compute_totals)) as stream:
            async for response in stream:
                yield response

    # ----------------------------------------------------------------- loads, switches, drains
    def record_dependencies(self, planned: Mapping[str, tuple[str, ...]]) -> None:
        """Record, per model about to load, the models its ensemble steps call (the repository
        manager's plan, read from the configs to load)."""
        self._dependencies.update(planned)

    def forget_dependencies(self, name: str) -> tuple[str, ...]:
        """Forget what model ``name`` calls (it was unloaded by name); returns it."""
        return self._dependencies.pop(name, ())

    def lock(self, name: str) -> asyncio.Lock:
        """The lock held while model ``name``'s entry changes (load, switch, unload, an
        ensemble's recheck); one per model, created on first use."""
        return self._locks.setdefault(name, asyncio.Lock())

    async def load(
        self,
        name: str,
        locate: Locate,
        override: ModelConfig | None,
        directory: OverrideDirectory | None = None,
        keep: frozenset[int] = frozenset(),
        loaded: Callable[[str], object] | None = None,
    ) -> ModelEntry:
        """(Re)load ``name`` from its repository folder, or from ``directory`` (file
        overrides; the entry then owns it, and it is removed at once when nothing was
        loaded), beside what serves, then switch (:mod:`workbench.engine.models.switching`).

        ``locate(name)`` (blocking; the repository manager's repositories, run on a worker
        thread under the model's lock) finds the folder when there is no ``directory``: the
        one way this class reaches the repositories. The versions of ``keep`` that are READY
        now are not loaded again: they move to the new entry as they are. Returns the new
        entry, also when the switch kept the old one; ``loaded(name)`` is called first.

        Raises:
            InvalidArgument: ``name`` is in no repository and there is no ``override``
                ("failed to load 'm', failed to poll from model repository").
        """
        try:
            entry = await self._load_entry(name, locate, override, directory, keep)
        except BaseException:
            if directory is not None:
                await asyncio.to_thread(directory.remove)
            raise
        if directory is not None and not entry.holds_instances():
            await asyncio.to_thread(entry.release_directory)
        if loaded is not None:
            loaded(name)
        return entry

    async def _load_entry(
        self,
        name: str,
        locate: Locate,
        override: ModelConfig | None,
        directory: OverrideDirectory | None,
        keep: frozenset[int],
    ) -> ModelEntry:
        async with self.lock(name):
            if directory is not None:
                location: ModelLocation | None = ModelLocation(name, directory.path)
            else:
                location = await asyncio.to_thread(locate, name)
            if location is None and override is None:  # Triton's poll logs why first
                log.error("failed to poll model '%s': model not found in any model repository.", name)
                raise InvalidArgument(f"failed to load '{name}', failed to poll from model repository")
            old = self._models.get(name)
            reuse = {v: old.versions[v] for v in keep if old is not None and v in old.ready_versions()}
            updates: list[tuple[VersionState, InstanceUpdate]] = []
            if location is not None and location.error:
                entry = ModelEntry(name, reason=location.error)
            else:
                path = location.path if location is not None else None
                serving = _serving_versions(old, reuse) if directory is None else {}
                result = await self._run_load(name, path, override, frozenset(reuse), serving)
                updates = _take_updates(result, old, reuse)
                entry = self._entry_for(result, reuse)
            entry.directory = directory
            if self._stopping:  # stop() began during the load: never serve it
                entry.settle()
                fresh = [(v, s) for v, s in entry.versions.items() if v not in reuse]
                await drain_versions(name, fresh)
                await _discard_updates(updates)
                return entry
            switch = switch_entry(self._models, old, entry, reuse)
            entry.settle()  # the load's answer, before an unload queued behind it runs
            if switch.kept_old:  # a failed reload keeps the last good versions serving
                assert old is not None
                await drain_versions(name, switch.drain)  # never served: nothing in flight
                await _discard_updates(updates)
                if old.config is not None:
                    self._dependencies[name] = tuple(composing_models(old.config))
                log.error("failed to reload '%s', the loaded versions keep serving: %s",
                          name, old.load_error)
                return entry
            if reuse and old is not None and entry.directory is None:
                entry.directory, old.directory = old.directory, None  # versions moved with it
            removals = [state.model.update_instances(update.config, update.added, update.removed,
                                                     update.memory)
                        for state, update in updates if state.model is not None]
        self._drain_later(name, switch.drain, old)
        if removals:  # load_model waits for the removed instances, as for drains
            self._track_drain(name, _all_done(removals))
        return entry

    async def _run_load(
        self, name: str, path: Path | None, override: ModelConfig | None, keep: frozenset[int],
        serving: dict[int, ServingVersion] | None = None,
    ) -> LoadResult:
        """:func:`~workbench.engine.models.loader.load_model` on a model-load thread, with the model
        listed as loading (``self._loading``) meanwhile."""
        loop = asyncio.get_running_loop()
        self._loading[name] = []

        def loading(versions: list[int]) -> None:  # on the event loop
            if name in self._loading:
                self._loading[name] = versions

        def on_versions(versions: list[int]) -> None:  # on the load thread
            loop.call_soon_threadsafe(loading, list(versions))

        resources = self._rate_limiter.resource_keys() if self._rate_limiter is not None else frozenset()
        try:
            return await self._load_threads.run(
                load_model, name, path, self.options, override,
                self._backend_context, keep, on_versions, serving, resources,
            )
        finally:
            self._loading.pop(name, None)

    async def unload(self, name: str) -> bool:
        """Unload every version of ``name`` under its lock after its in-flight requests finish
        (versions still serving live sequences after a reload too: those sequences end):
        UNAVAILABLE "unloaded", no longer held as an ensemble that follows its composing
        models. Returns False when the server does not know ``name`` (nothing to do)."""
        async with self.lock(name):
            entry = self._models.get(name)
            if entry is None:  # nothing to unload: success, as Triton (no name check either)
                return False
            self._retiring.end(name)  # versions still serving live sequences after a reload
            await entry.stop("unloaded")
            await self._retiring.finished(name)
            entry.reason = "unloaded" if not entry.versions else ""
            entry.blocked_versions = None  # unloaded by name: no longer follows its models
        return True

    def _drain_later(
        self, name: str, states: list[tuple[int, VersionState]], old: ModelEntry | None
    ) -> None:
        """Drain and unload ``states`` (out of service already) in a background task, then
        delete ``old``'s override folder, if any; :meth:`stop` and the repository manager's ``load_model`` wait
        for it (:meth:`drained`), a poll does not.

        Versions whose sequence batcher holds live sequences retire instead
        (:mod:`workbench.engine.models.retiring`): they serve those sequences until each ends,
        then unload (the folder goes after them); only :meth:`stop` and
        :meth:`unload` wait for them, and end them first. Call it in the same step as
        the switch: a sequence's next request must find its version retiring."""
        holding = [(v, s) for v, s in states if s.model is not None and s.model.live_sequences()]
        states = [(v, s) for v, s in states if all(s is not held for _, held in holding)]

        async def release() -> None:
            if old is not None and old.directory is not None:
                await asyncio.to_thread(old.release_directory)

        if holding:
            self._retiring.retire(name, holding, release)
        if not states and (holding or old is None or old.directory is None):
            return

        async def drain() -> None:
            # a request resolved to these versions just before the switch may still be on
            # its way to their queue (a decoupled request's enqueue task): let it get there
            await asyncio.sleep(0)
            await drain_versions(name, states)
            if not holding:
                await release()

        self._track_drain(name, drain())

    def _track_drain(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (a drain, or the removal of instances an update took out) in the
        background, listed in ``self._drains`` until it ends (:meth:`drained` waits)."""
        task = asyncio.ensure_future(work)
        tasks = self._drains.setdefault(name, set())
        tasks.add(task)

        def done(_: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not tasks and self._drains.get(name) is tasks:
                del self._drains[name]

        task.add_done_callback(done)

    async def drained(self, *names: str) -> None:
        """Wait until the background drains of ``names`` (started so far) have finished."""
        tasks = [t for n in names for t in self._drains.get(n, ())]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def serve_again(self, entry: ModelEntry, versions: tuple[int, ...]) -> ModelEntry:
        """Serve a held ensemble (:mod:`workbench.engine.manager.dependents`) again: a fresh entry
        (new schedulers and statistics) for ``versions``, from the config ``entry`` was
        loaded with, switched in for it. Returns the fresh entry (UNAVAILABLE with the
        reason when the ensemble does not fit its composing models after all)."""
        result = LoadResult(entry.name, config=entry.config, chosen=list(versions),
                            versions={v: LoadedVersion() for v in versions})
        fresh = self._entry_for(result)
        switch_entry(self._models, entry, fresh)
        return fresh

    def reload_ensemble(self, entry: ModelEntry) -> ModelEntry:
        """Load a READY ensemble again (:mod:`workbench.engine.manager.dependents`) because what it
        derives from its composing models changed (whether it is decoupled), as Triton loads
        the ensembles downstream of a modified model again: a fresh entry for its READY
        versions, from its config, checked against the composing models as loaded now,
        switched in for it; the old versions drain (their requests in flight finish)."""
        versions = entry.ready_versions()
        serving = entry.latest_ready
        result = LoadResult(entry.name, config=entry.config, chosen=list(versions),
                            versions={v: LoadedVersion() for v in versions},
                            labels=dict(serving.labels) if serving is not None else {})
        fresh = self._entry_for(result)
        fresh.directory, entry.directory = entry.directory, None  # the override folder moves on
        switch = switch_entry(self._models, entry, fresh)
        self._drain_later(entry.name, switch.drain, None)
        return fresh

    def _entry_for(self, result: LoadResult, reuse: dict[int, VersionState] | None = None) -> ModelEntry:
        """The entry of a finished load (plus the ``reuse`` versions it kept); an ensemble
        is first checked against its composing models as loaded now, and is UNAVAILABLE with
        the reason when that fails (held: checked again when they change). The versions the
        serving entry has READY hand their Prometheus counters to the new copies
        (:func:`~workbench.engine.models.entries.continued_metrics`)."""
        config = result.config
        if config is not None and not result.error and is_ensemble(config):
            self._dependencies[result.name] = tuple(composing_models(config))
            reason = ensemble_error(config, self._models, self._dependencies)
            if reason:  # served once its composing models fit (workbench.engine.manager.dependents)
                return ModelEntry(result.name, config=config, reason=reason,
                                  blocked_versions=tuple(result.chosen))
            result.config = with_transaction_policy(config, self._models)
            result.labels = ensemble_labels(config, result.labels, self._models)
        return entry_from_result(
            result, self._observers, self._cache, self._rate_limiter, self._infer_step, reuse,
            continued_metrics(self._models.get(result.name)),
        )


def _serving_versions(old: ModelEntry | None, reuse: Mapping[int, VersionState]) -> dict[int, ServingVersion]:
    """The READY versions of ``old`` a reload may update in place (not those it keeps as they
    are): config, files fingerprint and instances now (:mod:`workbench.engine.models.instance_update`)."""
    if old is None or old.directory is not None:
        return {}
    return {
        version: ServingVersion(state.model.config, state.model.fingerprint, tuple(state.model.instances()))
        for version, state in old.versions.items()
        if version not in reuse and state.state is ModelReadyState.READY and state.model is not None
        and state.model.fingerprint
    }


def _take_updates(
    result: LoadResult, old: ModelEntry | None, reuse: dict[int, VersionState]
) -> list[tuple[VersionState, InstanceUpdate]]:
    """Move the versions ``result`` updates in place out of it and into ``reuse`` (they serve
    on, the same objects); returns them with their updates, applied once the load switched."""
    updates = []
    for version, loaded in list(result.versions.items()):
        if loaded.update is not None and old is not None and version in old.versions:
            del result.versions[version]
            reuse[version] = old.versions[version]
            updates.append((old.versions[version], loaded.update))
    return updates


async def _all_done(work: list[Awaitable[object]]) -> None:
    await asyncio.gather(*work)


async def _discard_updates(updates: list[tuple[VersionState, InstanceUpdate]]) -> None:
    """Unload the instances created for updates that are not applied (the load failed or the
    server stops)."""
    added = [instance for _, update in updates for instance in update.added]
    if added:
        await asyncio.gather(*(asyncio.to_thread(instance.unload) for instance in added))


def _rate_limiter(options: ServerOptions) -> RateLimiter | None:
    """The shared rate limiter for ``--rate-limit=execution_count`` (None when off).

    Raises:
        InvalidArgument: a malformed ``--rate-limit-resource``.
    """
    if options.rate_limit == "off":
        return None
    return RateLimiter(explicit_pools(options.rate_limit_resource))


def entry_reason(entry: ModelEntry) -> str:
    """Why ``entry`` (or some of its versions) is not READY, as the load API reports it."""
    return entry.failure_reason()


__all__ = ["ModelLifecycle", "entry_reason"]
