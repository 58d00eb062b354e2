"""``EngineStore``: the engine a dashboard session acts on, and the tasks its callbacks start.

Every view of a dashboard (and the notebook widgets) holds one store. Widget callbacks are
synchronous (Panel's ``on_click`` / ``param.watch``, ipywidgets' ``observe``); the engine's
methods are coroutines on the engine's event loop. :meth:`EngineStore.spawn` bridges them:

* Called on the engine's loop (a notebook kernel that started the engine with top-level
  ``await``; a Bokeh/Panel server on the Jupyter server's loop, where the engine runs), the
  coroutine becomes a task on that loop: no thread, no lock.
* Called from another thread (a Panel server with its own loop thread), the coroutine is
  handed to the engine's loop with ``asyncio.run_coroutine_threadsafe``; Panel applies the
  widget changes it makes to the session's document on the next tick.

:meth:`EngineStore.settle` waits for every task started so far: tests (and scripts) call it
after driving a widget, to see what the callback did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from workbench import Server, WorkbenchError
from workbench.remote import AnyServer, RemoteLiveStatistics, RemoteServer
from workbench.serving.live_stats import LiveStatistics
from workbench.ui.shared.selection import ModelSelection

if TYPE_CHECKING:
    from workbench.tuning import Target

log = logging.getLogger(__name__)

#: what :meth:`EngineStore.spawn` returns: a task on the engine's loop, or a
#: ``concurrent.futures.Future`` when called from another thread (both: ``done()``,
#: ``cancel()``, ``add_done_callback``; only the task can be awaited)
Spawned: TypeAlias = "asyncio.Future[Any] | Future[Any]"
#: the kinds of Panel ``Alert`` banner the views show (its ``alert_type``)
AlertKind: TypeAlias = Literal["success", "info", "warning", "danger"]


def error_text(exc: BaseException) -> str:
    """One line for a failed engine call, for an error pane: the engine's message with its
    kind (``InvalidArgument: load failed for model 'm': ...``), never a traceback. An
    unexpected exception (a bug) is logged with its traceback and shown by type and text."""
    if isinstance(exc, WorkbenchError):
        return f"{type(exc).__name__}: {exc.message}"
    log.error("unexpected error in a workbench UI action", exc_info=exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def user_text(exc: BaseException) -> str:
    """One line for a person, without a Python exception name: an engine error's message
    (Triton's text, which says what failed and why), a client error (``ValueError``, a
    measurement's ``PerfError``) as its text; an unexpected exception (a bug) is logged with
    its traceback and shown as an unexpected error with its text."""
    if isinstance(exc, WorkbenchError):
        return exc.message
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    log.error("unexpected error in a workbench UI action", exc_info=exc)
    return f"unexpected error (logged on the server): {exc}" if str(exc) else \
        "unexpected error (logged on the server)"


class EngineStore:
    """The engine of one dashboard session (or one set of notebook widgets).

    Its :attr:`selection` is the session's one model selection: each tab binds its model
    dropdown to it (``store.selection.bind(select)``).

    Args:
        server: the started engine, or a server attached by URL
            (:class:`~workbench.remote.RemoteServer`: the tabs then work over its v2 API).
        loop: the loop the engine runs on; default: the running loop (construct the store on
            the engine's loop, as a notebook cell or a Bokeh session of the Jupyter host does).

    Raises:
        RuntimeError: no ``loop`` given and no loop running.
    """

    def __init__(self, server: AnyServer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.server = server
        self.loop = loop or asyncio.get_running_loop()
        #: the model chosen in this session, shared by its tabs (:mod:`workbench.ui.shared.selection`)
        self.selection = ModelSelection()
        self._pending: set[Spawned] = set()

    @property
    def remote(self) -> RemoteServer | None:
        """The attached server, or None for the engine in this process."""
        return self.server if isinstance(self.server, RemoteServer) else None

    @property
    def engine(self) -> Server:
        """The engine in this process.

        Raises:
            RuntimeError: the store is attached to a server by URL.
        """
        if isinstance(self.server, RemoteServer):
            raise RuntimeError(f"attached to {self.server.label}: no engine in this process")
        return self.server

    def live_statistics(self, history: int) -> LiveStatistics:
        """The live statistics of this store's server: the engine's observer and counters, or
        an attached server's statistics API read once a beat (:mod:`workbench.remote.live`)."""
        if isinstance(self.server, RemoteServer):
            return RemoteLiveStatistics(self.server, history=history, start=self.spawn)
        return LiveStatistics(self.server, history=history)

    def tuning_target(self) -> Target:
        """Where the Tuning tab measures: the engine in this process, or the attached server
        over HTTP (its first replica; measured over the network)."""
        from workbench.tuning import EngineTarget, RemoteTarget

        if isinstance(self.server, RemoteServer):
            return RemoteTarget(self.server.url.split("://", 1)[1], "http", headers=self.server.headers)
        return EngineTarget(self.server)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> Spawned:
        """Run ``coroutine`` on the engine's loop (see the module docstring); returns its
        task (on the loop) or its ``concurrent.futures.Future`` (from another thread).
        Exceptions stay in it (views catch and show their own)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        future: Spawned
        if running is self.loop:
            future = self.loop.create_task(coroutine)
        else:
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def starter(self, action: Callable[[], Coroutine[Any, Any, Any]]) -> Callable[[object], None]:
        """A widget callback (Panel's ``on_click``) that ignores its event and spawns
        ``action()`` (:meth:`spawn`); it returns None, as a widget callback does."""
        def start(_event: object) -> None:
            self.spawn(action())

        return start

    async def settle(self, timeout_s: float = 60.0) -> None:
        """Wait, on the engine's loop, until every task :meth:`spawn` started (including
        tasks those tasks started) is done; their errors are not raised here.

        Raises:
            TimeoutError: tasks still running after ``timeout_s`` seconds.
        """
        deadline = self.loop.time() + timeout_s
        while self._pending:
            waiting = [f if isinstance(f, asyncio.Future) else asyncio.wrap_future(f)
                       for f in list(self._pending)]
            remaining = deadline - self.loop.time()
            done, _ = await asyncio.wait(waiting, timeout=max(remaining, 0))
            if not done or remaining <= 0:
                raise TimeoutError(f"{len(self._pending)} UI tasks still running after "
                                   f"{timeout_s} s")

    async def attempt(self, action: Callable[[], Awaitable[Any]],
                      show_error: Callable[[str], None],
                      describe: Callable[[BaseException], str] = user_text) -> Any:
        """Await ``action()``; on failure call ``show_error(describe(exc))`` (default
        :func:`user_text`, without the exception's name: it is shown to a person;
        :func:`error_text` with it) and return None
        (views show engine errors in place instead of raising into Panel's callback)."""
        try:
            return await action()
        except Exception as exc:  # noqa: BLE001 - every failure is shown, none raised into Panel
            show_error(describe(exc))
            return None


__all__ = ["AlertKind", "EngineStore", "Spawned", "error_text", "user_text"]
