"""``ModelLifecycle``: the one owner of the models the server knows, following Triton's
``ModelRepositoryManager`` (which models to load: start-up list, load / unload API, poll,
ensembles' dependencies) over ``ModelLifecycle`` (each model's versions: load beside what
serves, switch, drain, unload; their states).

It owns the model entries, their per-model locks, the loads in progress, the background
drains, the versions retiring with live sequences (:mod:`workbench.engine.retiring`), the
temporary folders of file-override loads and the model-load threads. Everything else reads
it through a small API: :meth:`ModelLifecycle.resolve_request` / :meth:`~ModelLifecycle.resolve`
(a request to a loaded model), :meth:`~ModelLifecycle.load_model` /
:meth:`~ModelLifecycle.unload_model` / :meth:`~ModelLifecycle.load_models` /
:meth:`~ModelLifecycle.remove_model`, :meth:`~ModelLifecycle.index_rows`,
:meth:`~ModelLifecycle.version_states`, :attr:`~ModelLifecycle.models` (read-only),
:attr:`~ModelLifecycle.retiring` (live sequences kept by old versions) and
:meth:`~ModelLifecycle.stop`. The :class:`~workbench.engine.server.Server` is a facade over
it; the poller (:mod:`workbench.engine.poller`) and the ensemble dependency check
(:mod:`workbench.engine.dependents`) drive it.
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
from workbench.config.model_config import model_config_from_json
from workbench.config.normalize import is_ensemble
from workbench.config.validate_ensemble import composing_models
from workbench.engine.dependents import recheck_dependents
from workbench.engine.ensembles import (
    declared_dependencies,
    ensemble_error,
    ensemble_labels,
    load_waves,
    stop_waves,
    with_transaction_policy,
)
from workbench.engine.entries import continued_metrics, entry_from_result
from workbench.engine.instance_update import InstanceUpdate, ServingVersion
from workbench.engine.load_threads import LoadThreads
from workbench.engine.loader import LoadedVersion, LoadResult, load_model
from workbench.engine.model import LoadedModel
from workbench.engine.registry import ModelEntry, VersionState, drain_versions
from workbench.engine.repository_index import index_rows
from workbench.engine.response_cache import ResponseCache
from workbench.engine.retiring import RetiringVersions
from workbench.engine.rollout_split import Split
from workbench.engine.switching import switch_entry
from workbench.errors import (
    InternalError,
    InvalidArgument,
    InvalidModelConfig,
    ModelNotFound,
    ModelNotReady,
    Unavailable,
    WorkbenchError,
)
from workbench.options import ServerOptions
from workbench.repository.overrides import OverrideDirectory, OverrideStore
from workbench.repository.remote import (
    RemoteRepository,
    repository_name_counts,
    resolve_repositories,
)
from workbench.repository.repository import DUPLICATE_REASON, ModelLocation, ModelRepository
from workbench.repository.snapshot import ModelSnapshot, snapshot_model
from workbench.results import RepositoryIndexRow
from workbench.scheduling.ensemble import StepAdapt
from workbench.scheduling.rate_limiter import RateLimiter, explicit_pools
from workbench.statistics import ComputeTotals, SuccessObserver
from workbench.types import InferenceRequest, InferenceResponse, ModelReadyState

log = logging.getLogger(__name__)


class ModelLifecycle:
    """The models of one server: their entries, loads, switches, drains and unloads.

    Args:
        options: server options (repositories, control mode, load threads, cache size, ...).
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
        #: the load calls in progress (:meth:`load_models`): the models each loads (an
        #: ensemble's composing models too), and set when it is over
        self._batches: dict[asyncio.Event, frozenset[str]] = {}
        #: model -> background drains of its versions that left service (reloads)
        self._drains: dict[str, set[asyncio.Task[None]]] = {}
        #: versions that left service on a reload but still serve their live sequences
        self._retiring = RetiringVersions()
        self._repository: ModelRepository | None = None
        #: remote repositories (s3://, gs://, ...) and their local mirrors
        self._remotes: list[RemoteRepository] = []
        self._load_threads = LoadThreads(options.model_load_thread_count)
        self._stopping = False
        self._observers: list[SuccessObserver] = []
        size = options.response_cache_byte_size
        self._cache = ResponseCache(size) if size > 0 else None
        self._rate_limiter: RateLimiter | None = None
        self._backend_context: BackendContext | None = None
        #: temporary model folders of loads with file overrides (removed with their model)
        self._overrides = OverrideStore()
        #: model -> the config override it was last loaded with and its folder as it was
        #: then: a load without ``config`` keeps that override while the folder is unchanged
        self._kept_overrides: dict[str, tuple[ModelConfig, ModelSnapshot]] = {}
        #: models whose folder left the repositories in poll mode (deleted, or now in two
        #: repositories): kept without versions, listed by the index only while a folder of
        #: that name is there
        self._gone: set[str] = set()
        #: model -> the weighted split of its rollout (:mod:`workbench.engine.rollouts` sets
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
    def repository(self) -> ModelRepository:
        """The local model repositories served (remote ones: their mirrors). Raises
        AssertionError before :meth:`open`."""
        assert self._repository is not None, "the server is not started"
        return self._repository

    @property
    def opened(self) -> bool:
        """True once :meth:`open` set up the repositories (also when one of them was
        missing: then with none)."""
        return self._repository is not None

    @property
    def remotes(self) -> list[RemoteRepository]:
        """The remote repositories (``s3://``, ...) and their local mirrors ([] for none)."""
        return list(self._remotes)

    @property
    def retiring(self) -> RetiringVersions:
        """The versions that left service on a reload but still serve their live sequences."""
        return self._retiring

    @property
    def overrides(self) -> OverrideStore:
        """The temporary folders of the models loaded with file overrides."""
        return self._overrides

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
        """See :meth:`workbench.engine.server.Server.add_success_observer`."""
        self._observers.append(observer)

    def remove_success_observer(self, observer: SuccessObserver) -> None:
        """See :meth:`workbench.engine.server.Server.remove_success_observer`."""
        if observer in self._observers:
            self._observers.remove(observer)

    # ----------------------------------------------------------------- start & stop
    async def open(self, backend_context: BackendContext) -> None:
        """Set up the rate limiter and the backends' context, sync the remote repositories
        into their mirrors and open the repositories (no model loads yet).

        Raises:
            InvalidArgument: a model repository does not exist (a remote one: or cannot be
                read): the lifecycle is then open with no repository (:attr:`repository`
                lists nothing; Triton's server without a model repository manager); or a
                malformed ``--rate-limit-resource`` (nothing is open then).
        """
        self._rate_limiter = _rate_limiter(self.options)
        self._backend_context = backend_context
        try:
            paths, self._remotes = await asyncio.to_thread(
                resolve_repositories, self.options.model_repository, self.options.model_repository_cache
            )
            self._repository = ModelRepository(paths)
        except InvalidArgument:
            self._remotes, self._repository = [], ModelRepository([])
            raise

    async def load_startup_models(self) -> list[ModelEntry]:
        """Load the start-up models (every model in ``none`` and ``poll`` mode, the
        ``load_model`` list in ``explicit`` mode); returns the entries that failed."""
        names = await asyncio.to_thread(self._startup_models)
        self._explicit.update(names)
        entries = await self.load_models(names)
        return [entry for entry in entries.values() if entry.failed()]

    def _startup_models(self) -> list[str]:
        found = sorted(self.repository.scan())
        if self.options.model_control_mode != "explicit":
            if self.options.load_model:
                log.warning("--load-model is ignored in model control mode '%s': every model "
                            "in the repository is loaded", self.options.model_control_mode)
            return found
        wanted = self.options.load_model
        return found if "*" in wanted else [n for n in wanted]

    def begin_stop(self) -> None:
        """Refuse new requests and loads from now on (what loads meanwhile never serves)."""
        self._stopping = True

    async def stop(self) -> None:
        """Drain and unload every model: retiring versions stop waiting for their sequences,
        background drains finish, loads still running on the load threads end (also those
        whose caller stopped waiting), then ensembles stop before the models they call; the
        load threads and override folders go. Idempotent."""
        self._stopping = True
        self._retiring.end()
        await self._retiring.finished()
        while self._drains:
            await self._drained(*self._drains)
        await self._load_threads.finish()  # a load whose caller stopped waiting still runs
        for entries in stop_waves(dict(self._models), self._dependencies):
            await asyncio.gather(*(e.stop() for e in entries))
        await asyncio.to_thread(self._overrides.close)

    # ----------------------------------------------------------------- resolving requests
    def resolve_request(self, request: InferenceRequest) -> LoadedModel:
        """The version that runs ``request``: the retiring version holding the live
        sequence it continues, if any (:mod:`workbench.engine.retiring`), else for a request
        without a version of a model with a rollout split, the version the split chooses
        (:class:`~workbench.engine.rollout_split.Split`), else as :meth:`resolve` finds it.
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

    # ----------------------------------------------------------------- repository API
    def known_rows(self) -> list[RepositoryIndexRow]:
        """The repository index rows of the models the server knows (loaded, loading, failed
        or unloaded), without listing the repositories: synchronous and cheap, for scrapers
        on the event loop (the readiness metric). Same rows as :meth:`index_rows` otherwise;
        a model in the repositories that was never loaded is not listed."""
        rows: list[RepositoryIndexRow] = []
        for name in sorted((set(self._models) - self._gone) | set(self._loading)):
            rows.extend(index_rows(name, self._models.get(name), self._loading.get(name)))
        return rows

    async def index_rows(self, ready: bool = False) -> list[RepositoryIndexRow]:
        """Every model in the repositories, and every version the server knows, with state.

        Rows are ``{"name", "version", "state", "reason"}``; a model never loaded has only
        ``name``; ``reason`` only when non-empty (Triton's repository index). States are
        Triton's: ``READY``; ``LOADING`` for a version being loaded that does not serve yet
        (a model whose config is still being read has one row without version); a version
        being reloaded keeps serving and stays ``READY``; ``UNLOADING`` while a version
        drains (unload, or a version removed by a reload); ``UNAVAILABLE`` with the load
        error, or "unloaded". When the latest reload of a model failed and its previous
        versions kept serving, their ``READY`` rows carry that failure as ``reason``.

        The models are those in the repositories now (a remote repository is listed, not
        synced: a model uploaded to or deleted from the bucket shows at once, as in Triton,
        whose index lists the repository on each call) plus those the server knows, less
        those whose folder left the repositories in poll mode (kept without versions, as
        Triton's, but its index lists folders). A name found in two or more repositories has
        one row, UNAVAILABLE "model appears in two or more repositories", as Triton's.
        """
        assert self._repository is not None
        found = await asyncio.to_thread(repository_name_counts, self._repository, self._remotes)
        rows: list[RepositoryIndexRow] = []
        for name in sorted(set(found) | (set(self._models) - self._gone) | set(self._loading)):
            if found.get(name, 0) > 1:
                rows.append({"name": name, "state": ModelReadyState.UNAVAILABLE.value,
                             "reason": DUPLICATE_REASON})
                continue
            entry = self._models.get(name)
            rows.extend(index_rows(name, entry, self._loading.get(name)))
        if ready:
            rows = [r for r in rows if r.get("state") == "READY"]
        return rows

    async def load_model(
        self, name: str, config: str | dict[str, Any] | None = None, files: dict[str, bytes] | None = None
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
        READY ones are left as they are. After a model's (re)load the ensembles that call it
        are checked again: those its new config no longer fits become UNAVAILABLE with
        Triton's reason, those it fits again READY (:mod:`workbench.engine.dependents`);
        that does not change what this returns or raises for ``name``.

        The load runs on the model-load threads (``model_load_thread_count``): the event
        loop, health checks and the other models keep serving meanwhile; the repository
        index shows the versions that do not serve yet as LOADING. Traffic moves to the new
        versions as soon as they are ready; this returns once the old ones have drained and
        unloaded (meanwhile UNLOADING in the index when the new load no longer has their
        version); an old version whose sequence batcher holds live sequences keeps serving
        them after this returns, until each ends (:mod:`workbench.engine.retiring`), while
        new sequences start on the new versions. A failed reload leaves the old versions
        serving with the failure as the reason of their READY rows in the index.

        A load without ``config`` (and without ``files``) of a model serving with a ``config``
        override keeps that override while nothing in the model's folder changed (Triton's
        repository manager finds the model unmodified); once a file there changed (compared
        by content, :mod:`workbench.repository.snapshot`; Triton compares modification
        times) it loads from the folder again. An unload forgets the override.

        Loads and unloads of one model take turns (Triton's repository manager): a load
        that arrives while the model unloads waits for the unload, then loads; an unload
        that arrives during a load waits for its switch. What this answers is settled at
        the switch: an unload right after it does not make it fail.

        With remote repositories (``s3://``, ...) the model's folder is synced from the
        remote into the local mirror first, and so are the composing models the load loads
        with it (Triton polls the repository, ensembles' composing models included, on each
        load): a model uploaded or changed in the bucket loads as it is there now.

        Raises:
            Unavailable: the server is not in explicit model control mode ("explicit model
                load / unload is not allowed if polling is enabled", Triton's text).
            InvalidArgument: the model is not in any repository, or in more than one ("failed
                to load 'm', failed to poll from model repository", Triton's text; the versions
                loaded keep serving), or failed to load (reason;
                for an ensemble, e.g. "ensemble 'e' depends on 'm' which has no loaded
                version. ..." or a step mapping error, see :mod:`workbench.engine.ensembles`);
                ``files`` without ``config`` ("failed to load 'm', failed to poll from model
                repository: Load parameter 'config' must be specified for model file
                override") or with an invalid path ("...: Invalid file parameter
                'file:../x': ..."): nothing is loaded or written then; a remote repository
                could not be read ("failed to load 'm', failed to poll from model
                repository: ..."); an empty or blank name ("Model name cannot be empty.
                Please enter a valid name to deploy.") or one that could name a folder
                outside the repositories ('/' in it, or '..' / '.' once stripped: "invalid
                model name 'm', model name must not contain path traversal characters"),
                Triton's texts, checked before anything is read.
            InternalError: a ``files`` path component longer than 255 bytes ("failed to
                load 'm', failed to poll from model repository: Invalid file parameter
                ..."): Triton's INTERNAL (HTTP 500), which its clients check.
            InvalidModelConfig: ``config`` is not a JSON model config ("failed to load 'm',
                failed to poll from model repository: Invalid config override: ...", also
                logged, as Triton's poll failure); the loaded versions keep serving.
        """
        self._require_explicit()
        _check_load_name(name)
        override = _config_override(name, config) if config else None
        kept = self._kept_overrides.pop(name, None)
        if override is None and not files and kept is not None:
            override = await self._kept_override(name, kept)
        directory = await self._override_directory(name, override, files)
        if directory is None and self._remotes:
            await asyncio.to_thread(self.sync_remotes, name)
        if directory is None:
            location = await asyncio.to_thread(self.repository.locate, name)
            if location is not None and location.error:  # in two repositories: Triton's poll
                log.error("failed to poll model '%s': not unique across all model repositories", name)
                raise InvalidArgument(f"failed to load '{name}', failed to poll from model repository")
        self._explicit.add(name)
        entries = await self.load_models(
            [name], {name: override} if override else None, {name: directory} if directory else None,
            sync_remotes=True,
        )
        await self._drained(name)
        entry = entries[name]
        if entry.outcome is None:
            entry.settle()
        if entry.outcome:  # as the load switched: an unload after it does not fail it
            raise InvalidArgument(f"load failed for model '{name}': {entry.outcome}")
        if override is not None and directory is None:
            snapshot = await asyncio.to_thread(self._snapshot, name)
            if snapshot is not None:
                self._kept_overrides[name] = (override, snapshot)

    async def _kept_override(
        self, name: str, kept: tuple[ModelConfig, ModelSnapshot]
    ) -> ModelConfig | None:
        """The override ``name`` was last loaded with, when its folder is as it was then and
        the model still serves (Triton's repository manager finds the model unmodified and
        keeps it as loaded); None when a file changed: the load reads the folder again."""
        entry = self._models.get(name)
        if entry is None or entry.latest_ready is None:
            return None
        if await asyncio.to_thread(self._snapshot, name) != kept[1]:
            return None
        return kept[0]

    def _snapshot(self, name: str) -> ModelSnapshot | None:
        """Blocking: model ``name``'s folder reduced to digests (None when it is in no
        repository or cannot be read)."""
        location = self.repository.locate(name)
        if location is None or location.error or location.path is None:
            return None
        try:
            return snapshot_model(location.path)
        except Exception:  # noqa: BLE001 - unreadable: nothing to compare, the override goes
            return None

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload every version of ``name`` after its in-flight requests finish (versions
        still serving live sequences after a reload too: those sequences end, as in Triton).

        With ``unload_dependents`` an ensemble's composing models are unloaded too (and
        theirs, for ensembles of ensembles), as Triton does: except those loaded by name
        (start-up list or load API) and those another loaded ensemble still calls. Without
        it they stay loaded. The ensembles that call an unloaded model become UNAVAILABLE
        once their requests in flight finish ("ensemble e contains models that are not
        available or ambiguous: m", Triton's dependency check), and READY again when it is
        loaded again (:mod:`workbench.engine.dependents`).

        A name the server has not loaded (not in any repository, or never loaded) is a
        success with nothing to do, as in Triton; unload checks no name rules either.

        Raises:
            Unavailable: the server is not in explicit model control mode.
        """
        self._require_explicit()
        await self._unload(name, unload_dependents)

    async def _unload(self, name: str, unload_dependents: bool) -> None:
        # a load in progress that loads this model (an ensemble's with its composing models)
        # ends first: its ensemble must not find the model gone (Triton's unload waits)
        batches = [done.wait() for done, names in self._batches.items() if name in names]
        if batches:
            await asyncio.gather(*batches)
        self._kept_overrides.pop(name, None)
        async with self.lock(name):
            entry = self._models.get(name)
            if entry is None:  # nothing to unload: success, as Triton (no name check either)
                return
            self._retiring.end(name)  # versions still serving live sequences after a reload
            await entry.stop("unloaded")
            await self._retiring.finished(name)
            entry.reason = "unloaded" if not entry.versions else ""
            entry.blocked_versions = None  # unloaded by name: no longer follows its models
        composing = self._dependencies.pop(name, ())
        self._explicit.discard(name)
        await recheck_dependents(self, [name])
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

    def sync_remotes(self, name: str | None = None) -> None:
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

    async def remove_model(self, name: str) -> None:
        """A model folder left the repositories, or is now in two of them (poll mode): drain
        and unload every version, and keep the model without versions, as Triton's poll
        (requests get "'m' has no available versions", not "'m' is not found"); the
        repository index lists it only while a folder of that name is there (Triton's index
        lists the folders). It loads again when its folder is back (a poll finds it new)."""
        if name in self._models:
            await self._unload(name, unload_dependents=False)
            self._gone.add(name)

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
            return await self._load_threads.run(self._overrides.create, name, override, files)
        except (InvalidArgument, InternalError) as exc:
            raise _poll_failure(name, exc) from None

    def _require_explicit(self) -> None:
        if self.options.model_control_mode != "explicit":
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    def lock(self, name: str) -> asyncio.Lock:
        """The lock held while model ``name``'s entry changes (load, switch, unload, an
        ensemble's recheck); one per model, created on first use."""
        return self._locks.setdefault(name, asyncio.Lock())

    async def load_models(
        self,
        names: list[str],
        overrides: dict[str, ModelConfig] | None = None,
        directories: dict[str, OverrideDirectory] | None = None,
        keep: dict[str, frozenset[int]] | None = None,
        sync_remotes: bool = False,
        loaded: Callable[[str], object] | None = None,
    ) -> dict[str, ModelEntry]:
        """Load ``names`` and the composing models of the ensembles among them that are not
        READY yet, non-ensembles first, then each ensemble once the models it calls are
        loaded (:func:`workbench.engine.ensembles.load_waves`); then check the other
        ensembles that call them again (:mod:`workbench.engine.dependents`). Returns every
        entry loaded. An unload of any model it loads waits until it returns (Triton: an
        unload of a composing model while its ensemble loads waits, and both succeed).
        A model in ``directories`` loads from that folder instead of the repository.

        ``keep``: per model, versions whose files did not change (poll mode): those that are
        READY keep serving as they are instead of loading again. ``sync_remotes``: sync the
        composing models to load from the remote repositories first (explicit load).
        ``loaded(model)``: called once that model's load is over (switched, or failed with its
        reason as its state), while the others may still load: how a poll knows which changes
        are applied (:mod:`workbench.engine.poller`).

        Raises:
            InvalidArgument: a model is in no repository (and has no override config).
        """
        overrides = overrides or {}
        directories = directories or {}
        keep = keep or {}
        ready = {n for n, e in self._models.items() if e.latest_ready is not None}
        sync = self.sync_remotes if sync_remotes and self._remotes else None
        done_event = asyncio.Event()
        self._batches[done_event] = frozenset(names)
        try:
            planned = await asyncio.to_thread(self._plan_dependencies, names, overrides, ready, sync)
            self._batches[done_event] = frozenset(planned)
            self._dependencies.update(planned)
            self._gone.difference_update(planned)  # its folder is back (or loaded by name)
            entries: dict[str, ModelEntry] = {}
            for wave in load_waves(planned):
                done = await asyncio.gather(
                    *(self._load(n, overrides.get(n), directories.get(n), keep.get(n, frozenset()), loaded)
                      for n in wave)
                )
                entries.update(zip(wave, done, strict=True))
            await recheck_dependents(self, entries)
            return entries
        finally:
            done_event.set()
            del self._batches[done_event]

    def _plan_dependencies(
        self, names: list[str], overrides: dict[str, ModelConfig], ready: set[str],
        sync: Callable[[str], object] | None = None,
    ) -> dict[str, tuple[str, ...]]:
        """Blocking: ``names`` plus the composing models to load with them (those in a
        repository and not in ``ready``), each with the models its config's steps call.
        ``sync(model)`` runs before each composing model is looked for (remote mirrors).

        Raises:
            InvalidArgument: ``sync`` failed.
        """
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
            planned[name] = tuple(declared_dependencies(path, overrides.get(name),
                                                        self.options.model_config_max_size,
                                                        self.options.model_config_name))
            wanted = [m for m in planned[name] if m not in ready and m not in planned]
            if sync is not None and wanted:
                for model in wanted:
                    sync(model)
                found = self._repository.scan()
            queue.extend(m for m in wanted if m in found)
        return planned

    async def _load(
        self,
        name: str,
        override: ModelConfig | None,
        directory: OverrideDirectory | None = None,
        keep: frozenset[int] = frozenset(),
        loaded: Callable[[str], object] | None = None,
    ) -> ModelEntry:
        """(Re)load ``name`` from its repository folder, or from ``directory`` (file
        overrides; the entry then owns it, and it is removed at once when nothing was
        loaded), beside what serves, then switch (:mod:`workbench.engine.switching`).

        The versions of ``keep`` that are READY now are not loaded again: they move to the
        new entry as they are. Returns the new entry, also when the switch kept the old one;
        ``loaded(name)`` is called first.
        """
        try:
            entry = await self._load_entry(name, override, directory, keep)
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
        override: ModelConfig | None,
        directory: OverrideDirectory | None,
        keep: frozenset[int],
    ) -> ModelEntry:
        assert self._repository is not None
        async with self.lock(name):
            if directory is not None:
                location: ModelLocation | None = ModelLocation(name, directory.path)
            else:
                location = await asyncio.to_thread(self._repository.locate, name)
            if location is None and override is None:
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
        """:func:`~workbench.engine.loader.load_model` on a model-load thread, with the model
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

    def _drain_later(
        self, name: str, states: list[tuple[int, VersionState]], old: ModelEntry | None
    ) -> None:
        """Drain and unload ``states`` (out of service already) in a background task, then
        delete ``old``'s override folder, if any; :meth:`stop` and :meth:`load_model` wait
        for it (:meth:`_drained`), a poll does not.

        Versions whose sequence batcher holds live sequences retire instead
        (:mod:`workbench.engine.retiring`): they serve those sequences until each ends,
        then unload (the folder goes after them); only :meth:`stop` and
        :meth:`unload_model` wait for them, and end them first. Call it in the same step as
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
        background, listed in ``self._drains`` until it ends (:meth:`_drained` waits)."""
        task = asyncio.ensure_future(work)
        tasks = self._drains.setdefault(name, set())
        tasks.add(task)

        def done(_: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not tasks and self._drains.get(name) is tasks:
                del self._drains[name]

        task.add_done_callback(done)

    async def _drained(self, *names: str) -> None:
        """Wait until the background drains of ``names`` (started so far) have finished."""
        tasks = [t for n in names for t in self._drains.get(n, ())]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def serve_again(self, entry: ModelEntry, versions: tuple[int, ...]) -> ModelEntry:
        """Serve a held ensemble (:mod:`workbench.engine.dependents`) again: a fresh entry
        (new schedulers and statistics) for ``versions``, from the config ``entry`` was
        loaded with, switched in for it. Returns the fresh entry (UNAVAILABLE with the
        reason when the ensemble does not fit its composing models after all)."""
        result = LoadResult(entry.name, config=entry.config, chosen=list(versions),
                            versions={v: LoadedVersion() for v in versions})
        fresh = self._entry_for(result)
        switch_entry(self._models, entry, fresh)
        return fresh

    def reload_ensemble(self, entry: ModelEntry) -> ModelEntry:
        """Load a READY ensemble again (:mod:`workbench.engine.dependents`) because what it
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
        (:func:`~workbench.engine.entries.continued_metrics`)."""
        config = result.config
        if config is not None and not result.error and is_ensemble(config):
            self._dependencies[result.name] = tuple(composing_models(config))
            reason = ensemble_error(config, self._models, self._dependencies)
            if reason:  # served once its composing models fit (workbench.engine.dependents)
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
    are): config, files fingerprint and instances now (:mod:`workbench.engine.instance_update`)."""
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


def _check_load_name(name: str) -> None:
    """Refuse a name to load that is blank or could leave the repositories (Triton's load
    checks and texts; unload does no such check, as in Triton).

    Raises:
        InvalidArgument: see :meth:`ModelLifecycle.load_model`.
    """
    if not name.strip():
        raise InvalidArgument("Model name cannot be empty. Please enter a valid name to deploy.")
    if "/" in name or name.strip() in ("..", "."):
        raise InvalidArgument(f"invalid model name '{name}', model name must not contain path "
                              "traversal characters")


def _poll_failure(name: str, cause: InvalidArgument | InternalError) -> WorkbenchError:
    """A load refused before anything is read, as Triton's poll failure: the cause is logged
    ("Poll failed for model directory 'm': ...") and the error reads "failed to load 'm',
    failed to poll from model repository: <cause>", with the cause's code (Triton answers
    INTERNAL for every poll failure; here only where the cause is internal, e.g. a file
    name the file system cannot hold, which Triton's clients check; a client's mistake
    stays INVALID_ARGUMENT)."""
    log.error("Poll failed for model directory '%s': %s", name, cause.message)
    return type(cause)(f"failed to load '{name}', failed to poll from model repository: {cause.message}")


def _config_override(name: str, config: str | dict[str, Any]) -> ModelConfig:
    """The ``config`` load parameter parsed (Triton's ``JsonToModelConfig``).

    Raises:
        InvalidModelConfig: not a JSON model config: "failed to load 'm', failed to poll
            from model repository: Invalid config override: <why>" (Triton's prefix and
            log line; Triton answers INTERNAL, here INVALID_ARGUMENT, a client's mistake).
        InvalidArgument: the config names another model: "failed to load 'm', failed to poll
            from model repository: unexpected directory name 'm' for model 'n', directory
            name must equal model name" (Triton's poll failure and its logged cause).
    """
    try:
        parsed = model_config_from_json(config)
    except InvalidModelConfig as exc:
        raise _poll_failure(name, InvalidModelConfig(f"Invalid config override: {exc.message}")) from None
    if parsed.name and parsed.name != name:
        raise _poll_failure(name, InvalidArgument(f"unexpected directory name '{name}' for model '{parsed.name}', "
                                                  "directory name must equal model name"))
    return parsed


__all__ = ["ModelLifecycle", "entry_reason"]
