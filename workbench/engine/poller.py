"""``--model-control-mode poll``: rescan the model repositories periodically and apply what
changed (Triton's ``ModelRepositoryManager::PollAndUpdate`` driven by tritonserver's poll
loop every ``--repository-poll-secs`` seconds).

How a change is seen: each poll takes a :func:`~workbench.repository.snapshot.snapshot_repository`
(on a worker thread: file system reads and hashing never run on the event loop) and
compares it with the snapshot of the previous poll (the first one is taken before the
start-up models load):

==========================================  ==============================================
change                                      action
==========================================  ==============================================
new model folder                            load it
model folder gone                           drain, unload, forget it (leaves the index)
file outside the version folders changed    reload the whole model: every version loads
(``config.pbtxt``, labels, ``configs/``)    again beside the serving ones, then switches
version folder added, removed or changed    version-level reload: the version policy is
                                            applied to the folders now present; unchanged
                                            READY versions keep serving untouched, new or
                                            changed ones load, the ones no longer selected
                                            drain (UNLOADING) and unload
==========================================  ==============================================

Every (re)load follows :mod:`workbench.engine.switching`: the new versions load beside the
serving ones and take over when ready; a model whose new config or files fail to load keeps
serving its last good versions, with the failure as the reason of its READY rows in the
repository index (a model that never loaded is UNAVAILABLE with the reason). A model whose
folder did not change is not retried. Loads of one poll run concurrently
(``--model-load-thread-count``), ensembles after the models they call (a new ensemble and
its new composing models may appear in the same poll); removals are applied first,
ensembles before the models they call. Ensembles resolve their composing models for each
request, so reloading a composing model keeps its ensembles serving; after each change the
ensembles that call a changed model are checked again (:mod:`workbench.engine.dependents`):
one that no longer fits is UNAVAILABLE with the reason, and READY again once it fits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.engine.ensembles import stop_waves
from workbench.repository.repository import ModelRepository
from workbench.repository.snapshot import ModelSnapshot, snapshot_repository

if TYPE_CHECKING:
    from workbench.engine.server import Server

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RepositoryChanges:
    """What differs between two snapshots.

    Attributes:
        added: model folders that appeared.
        removed: model folders that disappeared.
        reload: models changed outside their version folders: reload every version.
        versions: models whose version folders alone changed, each with the versions whose
            folder is unchanged (those keep serving if READY).
    """

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reload: list[str] = field(default_factory=list)
    versions: dict[str, frozenset[int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.reload or self.versions)


def diff_snapshots(
    before: dict[str, ModelSnapshot], after: dict[str, ModelSnapshot]
) -> RepositoryChanges:
    """The changes from ``before`` to ``after`` (see the module docstring)."""
    changes = RepositoryChanges(
        added=sorted(set(after) - set(before)), removed=sorted(set(before) - set(after))
    )
    for name in sorted(set(after) & set(before)):
        old, new = before[name], after[name]
        if old == new:
            continue
        if old.error or new.error or old.path != new.path or old.model_digest != new.model_digest:
            changes.reload.append(name)
        else:
            same = frozenset(v for v, digest in new.versions.items() if old.versions.get(v) == digest)
            changes.versions[name] = same
    return changes


class RepositoryPoller:
    """Applies repository changes to a :class:`~workbench.engine.server.Server` in poll mode.

    Args:
        server: the engine whose models follow the repository.
        repository: the repositories it serves.
        interval_s: seconds between two polls (``--repository-poll-secs``, default 15 as
            tritonserver); 0 = no periodic poll (as tritonserver), only
            :meth:`~workbench.engine.server.Server.poll_repository`.
        sync: blocking, run on a thread before each scan: brings the local mirrors of
            remote repositories up to date (:mod:`workbench.repository.remote`); a failure
            is logged and the poll scans what is there.
    """

    def __init__(self, server: Server, repository: ModelRepository, interval_s: float,
                 sync: Callable[[], object] | None = None) -> None:
        self._server = server
        self._sync = sync
        self._repository = repository
        self.interval_s = interval_s
        self._known: dict[str, ModelSnapshot] = {}
        self._lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def baseline(self) -> None:
        """Record the repository as it is now: what the start-up load serves."""
        self._known = await asyncio.to_thread(snapshot_repository, self._repository)

    def start(self) -> None:
        """Poll every ``interval_s`` seconds in a task on the running loop (none if 0)."""
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop polling; a poll under way finishes first."""
        self._stopped.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def poll(self) -> RepositoryChanges:
        """Scan now and apply the changes since the last poll; returns them. One poll at a
        time (a call during a poll waits for it, then scans again).

        Errors of one model's load are that model's state (index reason), never raised.
        If applying fails otherwise (a model folder vanished half-way), the error is
        logged and the next poll compares against the previous snapshot again, so
        nothing is missed.
        """
        async with self._lock:
            if self._sync is not None:
                try:
                    await asyncio.to_thread(self._sync)
                except Exception:  # unreachable storage: what was synced so far is scanned
                    log.exception("failed to sync remote model repository")
            after = await asyncio.to_thread(snapshot_repository, self._repository)
            changes = diff_snapshots(self._known, after)
            if not changes:
                return changes
            log.info("poll: added %s, removed %s, reloaded %s, versions changed %s",
                     changes.added, changes.removed, changes.reload, sorted(changes.versions))
            try:
                await self._apply(changes)
            except Exception:
                log.exception("failed to apply model repository changes")
                return changes
            self._known = after
            return changes

    async def _apply(self, changes: RepositoryChanges) -> None:
        server = self._server
        gone = {n: server._models[n] for n in changes.removed if n in server._models}
        for wave in stop_waves(gone, server._dependencies):
            await asyncio.gather(*(server._remove_model(entry.name) for entry in wave))
        names = changes.added + changes.reload + list(changes.versions)
        if names and not server._stopping:
            await server._load_models(sorted(names), keep=changes.versions)

    async def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                await asyncio.wait_for(self._stopped.wait(), self.interval_s)
                return
            except TimeoutError:
                pass
            try:
                await self.poll()
            except Exception:  # never let one bad poll end polling
                log.exception("failed to poll model repository")


__all__ = ["RepositoryChanges", "RepositoryPoller", "diff_snapshots"]
