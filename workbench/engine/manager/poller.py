"""``--model-control-mode poll``: rescan the model repositories periodically and apply what
changed (Triton's ``ModelRepositoryManager::PollAndUpdate``, every ``--repository-poll-secs``).

Each poll takes a :func:`~workbench.repository.snapshot.snapshot_repository` and compares it
with the previous one (the first is taken before the start-up models load): a new model
folder loads; a folder gone (or in two repositories) drains, unloads and is kept without
versions; a file outside the version folders reloads the whole model; a version folder
added, removed or changed reloads those versions under the version policy. (Re)loads follow
:mod:`workbench.engine.models.switching`; removals are applied first (ensembles before the models
they call), loads concurrently (ensembles after their composing models); dependent
ensembles are checked again (:mod:`workbench.engine.manager.dependents`). A model whose folder did
not change is not retried.

One model never stops the polling of the others: its snapshot becomes known once its own
change is applied (``load_models``' ``loaded`` callback); a poll waits for its changes at
most ``overrun_s`` seconds (a warning). A scan (remote sync, then snapshot) runs on a daemon
thread of its own, at most one at a time, never on the loop's executor: each read is bounded
(:data:`~workbench.files.model_files.READ_TIMEOUT_S`), a scan past ``overrun_s`` is logged, and
:meth:`RepositoryPoller.stop` abandons a scan under way. The user's view of all this:
docs/model-control.md, "Model control modes and hot reload" (``poll``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from workbench.engine.models.ensembles import stop_waves
from workbench.files.bounded_calls import BoundedCalls
from workbench.files.model_files import READ_TIMEOUT_S
from workbench.repository.repository import ModelRepository
from workbench.repository.snapshot import ModelSnapshot, snapshot_repository

if TYPE_CHECKING:
    from workbench.engine.manager.repository_manager import RepositoryManager

log = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds a scan may take before it is logged as overrunning, when the poll interval is shorter
OVERRUN_S = 10.0


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

    def models(self) -> set[str]:
        """Every model these changes touch."""
        return {*self.added, *self.removed, *self.reload, *self.versions}


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
    """Applies repository changes to a server's models in poll mode.

    Args:
        manager: the repository manager whose models follow the repository
            (:class:`~workbench.engine.manager.repository_manager.RepositoryManager`).
        repository: the repositories it serves.
        interval_s: seconds between two polls (``--repository-poll-secs``, default 15 as
            tritonserver); 0 = no periodic poll (as tritonserver), only
            :meth:`~workbench.engine.api.server.Server.poll_repository`.
        sync: blocking, run on the scan's thread before each snapshot: brings the local
            mirrors of remote repositories up to date (:mod:`workbench.repository.remote`);
            a failure is logged and the poll scans what is there.
        overrun_s: seconds after which a scan still running is logged as overrunning
            (default: the interval, at least :data:`OVERRUN_S`).
    """

    def __init__(self, manager: RepositoryManager, repository: ModelRepository, interval_s: float,
                 sync: Callable[[], object] | None = None, overrun_s: float | None = None) -> None:
        self._manager = manager
        self._sync = sync
        self._repository = repository
        self.interval_s = interval_s
        self.overrun_s = overrun_s if overrun_s is not None else max(interval_s, OVERRUN_S)
        self._calls = BoundedCalls(READ_TIMEOUT_S)
        self._known: dict[str, ModelSnapshot] = {}
        #: models a change is being applied to (left out of the comparisons until it is done)
        self._busy: set[str] = set()
        #: the applies under way
        self._applying: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._scan_running: asyncio.Future | None = None
        self._scanning = False
        #: polls started (periodic and on request) and those that failed: the scan raised
        #: (the repository folder is gone or unreadable), applying the changes raised, or the
        #: remote sync before the scan raised (the metrics ``workbench_repository_polls_total``
        #: and ``workbench_repository_poll_failures_total``)
        self.polls = 0
        self._failures = 0  # counted on the loop
        self._sync_failures = 0  # counted on the scan thread (its only writer)

    @property
    def failures(self) -> int:
        """Polls that failed so far (see :attr:`polls`)."""
        return self._failures + self._sync_failures

    async def baseline(self) -> None:
        """Record the repository as it is now: what the start-up load serves."""
        self._known = await self._scan(sync=False)

    def start(self) -> None:
        """Poll every ``interval_s`` seconds in a task on the running loop (none if 0)."""
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop polling. Changes being applied finish first (the host's exit timeout bounds
        the wait); a scan under way is abandoned (its thread may be blocked on a file that
        never answers)."""
        self._stopped.set()
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            await asyncio.wait({task})
        if self._applying:
            await asyncio.wait(set(self._applying))

    async def poll(self) -> RepositoryChanges:
        """Scan now and apply the changes since the last poll; returns them once applied.
        Changes an earlier poll is still applying are waited for first, so that everything on
        disk when this is called is applied when it returns. One scan at a time.

        Errors of one model's load are that model's state (index reason), never raised.
        If applying fails otherwise (a model folder vanished half-way), the error is
        logged and the next poll compares that model against its previous snapshot again,
        so nothing is missed.

        Raises:
            Exception: the scan failed (the repository folder is gone or unreadable).
        """
        if self._applying:
            await asyncio.wait(set(self._applying))
        changes, applying = await self._poll_once()
        if applying is not None:
            await asyncio.shield(applying)
        return changes

    async def _poll_once(self) -> tuple[RepositoryChanges, asyncio.Task[None] | None]:
        """Scan, and start applying what changed (the task returned); a model an earlier
        poll is still applying is left out, for a poll after that apply."""
        async with self._lock:
            self.polls += 1
            try:
                after = await self._scan(sync=True)
            except Exception:
                self._failures += 1
                raise
            busy = self._busy
            changes = diff_snapshots({n: s for n, s in self._known.items() if n not in busy},
                                     {n: s for n, s in after.items() if n not in busy})
            if not changes:
                return changes, None
            log.info("poll: added %s, removed %s, reloaded %s, versions changed %s",
                     changes.added, changes.removed, changes.reload, sorted(changes.versions))
            busy.update(changes.models())
            applying = asyncio.ensure_future(self._apply(changes, after))
            self._applying.add(applying)
            applying.add_done_callback(self._applying.discard)
            return changes, applying

    async def _scan(self, sync: bool) -> dict[str, ModelSnapshot]:
        """Sync (when asked and set up) and snapshot on the scan thread; log an overrun."""
        started = time.monotonic()
        if self._scan_running is None or self._scan_running.done():  # else: join the one under way
            self._scan_running = _on_daemon_thread(partial(self._scan_blocking, sync))
        running = self._scan_running
        self._scanning = True
        try:
            try:
                return await asyncio.wait_for(asyncio.shield(running), self.overrun_s)
            except TimeoutError:
                log.warning("poll: the scan of the model repository is still running after %.1fs "
                            "(a file or mount that does not answer?); polling waits for it",
                            self.overrun_s)
            result = await asyncio.shield(running)
            log.warning("poll: the scan of the model repository took %.1fs", time.monotonic() - started)
            return result
        finally:
            self._scanning = False

    def _scan_blocking(self, sync: bool) -> dict[str, ModelSnapshot]:
        if sync and self._sync is not None:
            try:
                self._sync()
            except Exception:  # unreachable storage: what was synced so far is scanned
                self._sync_failures += 1
                log.exception("failed to sync remote model repository")
        snapshots = snapshot_repository(self._repository, self._calls)
        # a name in two or more repositories is left out, as Triton's poll: it counts as
        # removed (unloaded, kept without versions) until one folder of that name is left
        return {name: snapshot for name, snapshot in snapshots.items() if snapshot.path is not None}

    async def _apply(self, changes: RepositoryChanges, after: dict[str, ModelSnapshot]) -> None:
        """Apply ``changes`` (found in the snapshot ``after``): each model's snapshot is known
        once its own change is applied. A failure is logged and counted; the models it left
        unapplied are compared against their previous snapshot again at the next poll."""
        lifecycle = self._manager.lifecycle
        try:
            for name in changes.removed:
                if name not in lifecycle.models:
                    self._known.pop(name, None)
            gone = {n: lifecycle.models[n] for n in changes.removed if n in lifecycle.models}
            for wave in stop_waves(gone, lifecycle.dependencies):
                await asyncio.gather(*(self._remove(entry.name) for entry in wave))
            names = changes.added + changes.reload + list(changes.versions)
            if names and not lifecycle.stopping:
                await self._manager.load_models(sorted(names), keep=changes.versions,
                                                loaded=partial(self._applied, after))
        except Exception:
            self._failures += 1
            log.exception("failed to apply model repository changes")
        finally:
            self._busy.difference_update(changes.models())

    async def _remove(self, name: str) -> None:
        await self._manager.remove_model(name)
        self._known.pop(name, None)

    def _applied(self, after: dict[str, ModelSnapshot], name: str) -> None:
        if name in after:
            self._known[name] = after[name]

    async def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                await asyncio.wait_for(self._stopped.wait(), self.interval_s)
                return
            except TimeoutError:
                pass
            try:
                changes, applying = await self._poll_once()
            except Exception:  # never let one bad poll end polling
                log.exception("failed to poll model repository")
                continue
            if applying is not None:
                await self._wait_applied(changes, applying)

    async def _wait_applied(self, changes: RepositoryChanges, applying: asyncio.Task[None]) -> None:
        """Wait for ``applying`` at most ``overrun_s`` seconds; past that, log it and go on
        (the next polls leave the models it applies alone until it ends)."""
        done, _ = await asyncio.wait({applying}, timeout=self.overrun_s)
        if not done:
            log.warning("poll: applying the changes of %s is still running after %.1fs (a load that "
                        "does not finish?); polling goes on for the other models",
                        sorted(changes.models()), self.overrun_s)


def _on_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """``fn()`` on a new daemon thread, as a future of the running loop. Unlike
    ``asyncio.to_thread``, a call that never returns holds up neither the loop's executor
    shutdown nor the interpreter's exit; cancelling the future only stops the waiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(result: T) -> None:
        if not future.done():
            future.set_result(result)

    def fail(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    def run() -> None:
        settle: Callable[[], None]
        try:
            settle = partial(deliver, fn())
        except BaseException as exc:  # noqa: BLE001  # handed to the awaiting future, which re-raises it
            settle = partial(fail, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=run, name="workbench-poll-scan", daemon=True).start()
    return future


__all__ = ["RepositoryChanges", "RepositoryPoller", "diff_snapshots"]
