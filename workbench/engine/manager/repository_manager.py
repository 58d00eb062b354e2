"""``RepositoryManager``: which models load and when, following Triton's
``ModelRepositoryManager`` (core ``model_repository_manager.cc``): the model control modes
(``none`` / ``poll`` / ``explicit``), the repositories (local, and remote ones' mirrors; a
name in two of them), the start-up models, the load and unload API (config and file
overrides, kept overrides), the repository index, the poll's changes
(:mod:`workbench.engine.manager.poller` drives :meth:`RepositoryManager.load_models` and
:meth:`~RepositoryManager.remove_model`) and the ensembles' dependencies (composing models
loaded first, unloaded with ``unload_dependents``, the dependents checked again:
:mod:`workbench.engine.manager.dependents`).

How one model's versions load, switch, drain and unload is the model lifecycle's
(:class:`~workbench.engine.models.lifecycle.ModelLifecycle`): the manager calls it, one way; the
lifecycle reaches the repositories only through the ``locate`` callback each
:meth:`~workbench.engine.models.lifecycle.ModelLifecycle.load` is given, and never imports this
module (``tests/architecture/test_layers.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendContext
from workbench.common.errors import (
    InternalError,
    InvalidArgument,
    InvalidModelConfig,
    Unavailable,
    WorkbenchError,
)
from workbench.common.results import RepositoryIndexRow
from workbench.config.model_config import model_config_from_json, model_config_path
from workbench.engine.manager.dependents import recheck_dependents
from workbench.engine.manager.repository_index import index_rows
from workbench.engine.models.ensembles import declared_dependencies, load_waves
from workbench.engine.models.lifecycle import ModelLifecycle
from workbench.engine.models.registry import ModelEntry
from workbench.messages.types import ModelReadyState
from workbench.repository.overrides import OverrideDirectory, OverrideStore
from workbench.repository.remote import (
    RemoteRepository,
    repository_name_counts,
    resolve_repositories,
)
from workbench.repository.repository import DUPLICATE_REASON, ModelLocation, ModelRepository
from workbench.repository.snapshot import ModelSnapshot, snapshot_model
from workbench.startup.options import ServerOptions

log = logging.getLogger(__name__)


class RepositoryManager:
    """Which models of one server load and when, over its model lifecycle.

    Args:
        options: server options (repositories, control mode, start-up models, ...).
        lifecycle: the models' versions, loads and drains; this manager drives it.
    """

    def __init__(self, options: ServerOptions, lifecycle: ModelLifecycle) -> None:
        self.options = options
        self.lifecycle = lifecycle
        #: models loaded by name (start-up list, load API); the others were loaded as an
        #: ensemble's composing models (Triton's ``explicitly_load_``)
        self._explicit: set[str] = set()
        #: the load calls in progress (:meth:`load_models`): the models each loads (an
        #: ensemble's composing models too), and set when it is over
        self._batches: dict[asyncio.Event, frozenset[str]] = {}
        self._repository: ModelRepository | None = None
        #: remote repositories (s3://, gs://, ...) and their local mirrors
        self._remotes: list[RemoteRepository] = []
        #: temporary model folders of loads with file overrides (removed with their model)
        self._overrides = OverrideStore()
        #: model -> the config override it was last loaded with and its folder as it was
        #: then: a load without ``config`` keeps that override while the folder is unchanged
        self._kept_overrides: dict[str, tuple[ModelConfig, ModelSnapshot]] = {}
        #: models whose folder left the repositories in poll mode (deleted, or now in two
        #: repositories): kept without versions, listed by the index only while a folder of
        #: that name is there
        self._gone: set[str] = set()

    # ----------------------------------------------------------------- read API
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
    def overrides(self) -> OverrideStore:
        """The temporary folders of the models loaded with file overrides."""
        return self._overrides

    # ----------------------------------------------------------------- start & stop
    async def open(self, backend_context: BackendContext) -> None:
        """Open the model lifecycle (the rate limiter and the backends' context), sync the
        remote repositories into their mirrors and open the repositories (no model loads yet).

        Raises:
            InvalidArgument: a model repository does not exist (a remote one: or cannot be
                read): the manager is then open with no repository (:attr:`repository`
                lists nothing; Triton's server without a model repository manager); or a
                malformed ``--rate-limit-resource`` (nothing is open then).
        """
        await self.lifecycle.open(backend_context)
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
        locations = self.repository.scan()
        found = sorted(locations)
        if self.options.model_control_mode != "explicit":
            if self.options.load_model:
                log.warning("--load-model is ignored in model control mode '%s': every model "
                            "in the repository is loaded", self.options.model_control_mode)
            return [name for name in found if self._config_readable(locations[name])]
        wanted = self.options.load_model
        return found if "*" in wanted else [n for n in wanted]

    def _config_readable(self, location: ModelLocation) -> bool:
        """False for a folder whose config Triton's poll cannot read: with
        ``--strict-model-config`` (auto-complete off) a folder without its config file fails
        the poll, logged as Triton logs it ("Poll failed for model directory 'm': failed to
        open text file for read <path>: No such file or directory"); the model is then left
        out at start-up (unknown to requests, not counted by strict readiness), as Triton's
        start-up poll leaves it out (L0_lifecycle test_parse_error_no_model_config)."""
        if not self.options.strict_model_config or location.path is None:
            return True
        path = model_config_path(location.path, self.options.model_config_name or None)
        if path.is_file():
            return True
        log.error("Poll failed for model directory '%s': failed to open text file for read %s: "
                  "No such file or directory", location.name, path)
        return False

    async def stop(self) -> None:
        """Drain and unload every model (:meth:`ModelLifecycle.stop
        <workbench.engine.models.lifecycle.ModelLifecycle.stop>`), then remove the override folders.
        Idempotent."""
        await self.lifecycle.stop()
        await asyncio.to_thread(self._overrides.close)

    # ----------------------------------------------------------------- repository API
    def known_rows(self) -> list[RepositoryIndexRow]:
        """The repository index rows of the models the server knows (loaded, loading, failed
        or unloaded), without listing the repositories: synchronous and cheap, for scrapers
        on the event loop (the readiness metric). Same rows as :meth:`index_rows` otherwise;
        a model in the repositories that was never loaded is not listed."""
        rows: list[RepositoryIndexRow] = []
        for name in sorted((set(self.lifecycle.models) - self._gone) | set(self.lifecycle.loading)):
            rows.extend(index_rows(name, self.lifecycle.models.get(name), self.lifecycle.loading.get(name)))
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
        for name in sorted(set(found) | (set(self.lifecycle.models) - self._gone) | set(self.lifecycle.loading)):
            if found.get(name, 0) > 1:
                rows.append({"name": name, "state": ModelReadyState.UNAVAILABLE.value,
                             "reason": DUPLICATE_REASON})
                continue
            entry = self.lifecycle.models.get(name)
            rows.extend(index_rows(name, entry, self.lifecycle.loading.get(name)))
        if ready:
            rows = [r for r in rows if r.get("state") == "READY"]
        return rows

    async def load_model(
        self, name: str, config: str | dict[str, Any] | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name`` (explicit mode); ``config`` (JSON) overrides config.pbtxt.

        ``files`` (Triton's ``file:<version>/<name>`` load parameters without the prefix: path
        relative to the model folder -> contents) load the model from a temporary folder holding
        only those files and ``config`` (then required); the repository stays untouched and the
        folder is removed at unload, reload and :meth:`stop` (:mod:`workbench.repository.overrides`).
        A reload is hot (:mod:`workbench.engine.models.switching`): returns once the old versions drained
        (live sequences keep an old version serving after that, :mod:`workbench.engine.models.retiring`);
        a failed one leaves them serving with the failure as their reason. Composing models that
        are not READY load first, then dependent ensembles are checked again
        (:mod:`workbench.engine.manager.dependents`). A kept ``config`` override, loads and unloads of one
        model taking turns, remote repositories synced first: Triton's repository manager, as
        docs/model-control.md, "Model control modes and hot reload" and "Remote repositories", say.

        Raises (Triton's texts, checked before anything is read or written where they can be):
            Unavailable: not in explicit mode ("explicit model load / unload is not allowed if
                polling is enabled").
            InvalidArgument: the model in no repository or in two ("failed to load 'm', failed to
                poll from model repository"), its load failed (the reason), ``files`` without
                ``config`` or with an invalid path ("... Invalid file parameter 'file:../x': ..."),
                a remote repository unreadable, an empty name or one with path traversal.
            InternalError: a ``files`` path component over 255 bytes (Triton's INTERNAL, HTTP 500).
            InvalidModelConfig: ``config`` is not a JSON model config ("... Invalid config
                override: ..."); the loaded versions keep serving."""
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
        await self.lifecycle.drained(name)
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
        entry = self.lifecycle.models.get(name)
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
        loaded again (:mod:`workbench.engine.manager.dependents`).

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
        lifecycle = self.lifecycle
        if not await lifecycle.unload(name):  # nothing to unload: success, as Triton
            return
        composing = lifecycle.forget_dependencies(name)
        self._explicit.discard(name)
        await recheck_dependents(lifecycle, [name])
        if not unload_dependents:
            return
        for model in composing:
            still_used = any(
                model in calls and lifecycle.models.get(other) is not None
                and lifecycle.models[other].ready_versions()
                for other, calls in lifecycle.dependencies.items()
            )
            if model not in self._explicit and not still_used and model in lifecycle.models:
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
        if name in self.lifecycle.models:
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
            return await self.lifecycle.load_threads.run(self._overrides.create, name, override, files)
        except (InvalidArgument, InternalError) as exc:
            raise _poll_failure(name, exc) from None

    def _require_explicit(self) -> None:
        if self.options.model_control_mode != "explicit":
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

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
        loaded (:func:`workbench.engine.models.ensembles.load_waves`); then check the other
        ensembles that call them again (:mod:`workbench.engine.manager.dependents`). Returns every
        entry loaded. An unload of any model it loads waits until it returns (Triton: an
        unload of a composing model while its ensemble loads waits, and both succeed).
        A model in ``directories`` loads from that folder instead of the repository.

        ``keep``: per model, versions whose files did not change (poll mode): those that are
        READY keep serving as they are instead of loading again. ``sync_remotes``: sync the
        composing models to load from the remote repositories first (explicit load).
        ``loaded(model)``: called once that model's load is over (switched, or failed with its
        reason as its state), while the others may still load: how a poll knows which changes
        are applied (:mod:`workbench.engine.manager.poller`).

        Raises:
            InvalidArgument: a model is in no repository (and has no override config).
        """
        overrides = overrides or {}
        directories = directories or {}
        keep = keep or {}
        ready = {n for n, e in self.lifecycle.models.items() if e.latest_ready is not None}
        sync = self.sync_remotes if sync_remotes and self._remotes else None
        done_event = asyncio.Event()
        self._batches[done_event] = frozenset(names)
        try:
            planned = await asyncio.to_thread(self._plan_dependencies, names, overrides, ready, sync)
            self._batches[done_event] = frozenset(planned)
            self.lifecycle.record_dependencies(planned)
            self._gone.difference_update(planned)  # its folder is back (or loaded by name)
            entries: dict[str, ModelEntry] = {}
            for wave in load_waves(planned):
                done = await asyncio.gather(
                    *(self.lifecycle.load(n, self.repository.locate, overrides.get(n), directories.get(n),
                                          keep.get(n, frozenset()), loaded)
                      for n in wave)
                )
                entries.update(zip(wave, done, strict=True))
            await recheck_dependents(self.lifecycle, entries)
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


def _check_load_name(name: str) -> None:
    """Refuse a name to load that is blank or could leave the repositories (Triton's load
    checks and texts; unload does no such check, as in Triton).

    Raises:
        InvalidArgument: see :meth:`RepositoryManager.load_model`.
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


__all__ = ["RepositoryManager"]
