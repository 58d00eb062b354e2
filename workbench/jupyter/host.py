"""The engine of one Jupyter server: started on Jupyter's event loop, stopped with it.

:class:`EngineHost` owns the :class:`~workbench.Server`, the optional standard v2 ports
(HTTP / gRPC / metrics, :class:`~workbench.serving.ports.OpenPorts`) and the live statistics
streams opened by the REST handlers. It knows nothing of tornado or traitlets: the extension
(:mod:`workbench.jupyter.extension`) builds it from its traits and calls :meth:`begin` when
Jupyter's loop runs and :meth:`stop` when Jupyter stops.
"""

from __future__ import annotations

import asyncio
import logging
import time

from workbench import Server, ServerNotReady, ServerOptions, WorkbenchError, __version__
from workbench.serving.drain import drain_engine
from workbench.serving.live_stats import LiveStatistics
from workbench.serving.ports import OpenPorts, bind_ports, switchable_options
from workbench.serving.switch import PortSwitch

log = logging.getLogger("workbench")

#: host states, in the order they are passed through
NOT_CONFIGURED, STARTING, RUNNING, FAILED, STOPPING, STOPPED = (
    "not configured", "starting", "running", "failed", "stopping", "stopped")


class EngineHost:
    """Start, serve and stop the engine inside a process that owns the event loop.

    Args:
        options: the engine's options; None when no model repository is configured (the
            host then stays ``not configured`` and starts nothing).
        open_ports: also serve the standard v2 HTTP / gRPC / metrics ports (the addresses,
            ports and ``allow_grpc`` / ``allow_metrics`` of ``options``).
        error: why there are no options (shown by :meth:`status` and in 503 answers): the
            host is then ``failed``; without it, ``not configured`` (no model repository).

    Attributes:
        server: the engine (None when not configured). Handlers reach it through
            :meth:`engine`, which checks that it runs.
        state: one of ``not configured``, ``starting``, ``running``, ``failed``,
            ``stopping``, ``stopped``.
        error: why the start failed (``failed``), or why nothing starts (``not configured``).
    """

    def __init__(self, options: ServerOptions | None, open_ports: bool, error: str = "") -> None:
        self.options = options
        self.open_ports = open_ports
        self.server = Server(options) if options is not None else None
        self.state = STOPPED
        if options is None:
            self.state = FAILED if error else NOT_CONFIGURED
            error = error or "no model repository configured (c.Workbench.model_repository)"
        self.error = error
        #: the v2 ports and their switch to a headless ``workbench serve`` (with open_ports)
        self.switch: PortSwitch | None = None
        self._start_task: asyncio.Task | None = None
        #: when the start began (``time.monotonic()``), None before :meth:`begin`
        self._began: float | None = None
        self._streams: set[LiveStatistics] = set()

    # ----------------------------------------------------------------- lifecycle
    def begin(self) -> None:
        """Start the engine in the background of the running loop (Jupyter keeps serving
        while models load); :attr:`state` is ``starting`` until it is ``running`` or
        ``failed``. Does nothing when not configured or already begun."""
        if self.server is None or self._start_task is not None:
            return
        self.state = STARTING
        self._began = time.monotonic()
        self._start_task = asyncio.get_running_loop().create_task(self.start())

    async def start(self) -> None:
        """Bind the v2 ports (with ``open_ports``), start the engine, serve the ports.

        Never raises for an engine or port failure: the host becomes ``failed`` with the
        reason in :attr:`error` (the Jupyter server keeps running without the engine), and
        the ports bound so far are released.
        """
        assert self.server is not None and self.options is not None
        self.state = STARTING
        bound = None
        ports_options = switchable_options(self.options) if self.open_ports else None
        if self.open_ports:
            bound = bind_ports(self.server, ports_options) if ports_options is not None else None
            if bound is None:
                self._fail("cannot open the v2 ports (see the log for the port in use)")
                return
        try:
            await self.server.start()
        except WorkbenchError as exc:
            if bound is not None:
                await bound.close()
            self._fail(exc.message)
            return
        if bound is not None and ports_options is not None:
            ports = OpenPorts(self.server, ports_options, bound)
            try:
                await ports.start()
            except RuntimeError as exc:  # no engine without the ports it was asked to serve
                await self.server.stop()
                self._fail(str(exc))
                return
            numbers = bound.ports()
            self.switch = PortSwitch(self.server, ports_options.model_copy(update={
                "http_port": numbers["http"], "grpc_port": numbers.get("grpc", ports_options.grpc_port),
                "metrics_port": numbers.get("metrics", ports_options.metrics_port)}), ports)
        self.state = RUNNING
        log.info("workbench engine running (%s mode)%s", self.options.model_control_mode,
                 f", v2 ports {bound.ports()}" if bound is not None else "")

    async def started(self) -> str:
        """Wait until the start :meth:`begin` launched has ended (at once when none was);
        returns :attr:`state` (``running`` or ``failed`` after a start). Waiting here never
        cancels the start."""
        if self._start_task is not None:
            await asyncio.shield(self._start_task)
        return self.state

    def _fail(self, reason: str) -> None:
        self.state, self.error = FAILED, reason
        log.error("workbench engine did not start: %s", reason)

    async def stop(self) -> None:
        """Stop accepting on the v2 ports, end the statistics streams, drain and unload
        every model (within ``exit_timeout_secs``), then release the ports. Waits for a start
        under way to finish first. Idempotent."""
        if self._start_task is not None and not self._start_task.done():
            await self._start_task
        if self.server is None or self.state != RUNNING:
            return
        self.state = STOPPING
        started = time.monotonic()
        for stream in list(self._streams):
            stream.close()
        if self.switch is not None:
            await self.switch.stop_accepting()  # headless: the child drains and exits
        assert self.options is not None
        await drain_engine(self.server, self.options, started)
        if self.switch is not None:
            await self.switch.close()
        self.state = STOPPED

    # ----------------------------------------------------------------- for handlers
    def engine(self) -> Server:
        """The running engine.

        Raises:
            ServerNotReady: the engine is not running (HTTP 503), with the host's state and
                the reason it failed or is not configured.
        """
        if self.server is None or self.state != RUNNING:
            detail = f": {self.error}" if self.error else ""
            raise ServerNotReady(f"the workbench engine is {self.state}{detail}")
        return self.server

    def elapsed_s(self) -> float:
        """Seconds since :meth:`begin` started the engine (0 before)."""
        return 0.0 if self._began is None else time.monotonic() - self._began

    def loading_progress(self) -> tuple[int, int]:
        """``(ready, known)``: the model versions READY and those the engine knows so far
        (loading, loaded or failed; cheap, read on the loop); ``(0, 0)`` when not configured."""
        if self.server is None:
            return 0, 0
        rows = self.server.model_readiness()
        return sum(ready for _name, _version, ready in rows), len(rows)

    def watch(self) -> LiveStatistics:
        """A :class:`LiveStatistics` on the running engine, closed by :meth:`stop` if its
        reader has not closed it (:meth:`unwatch`) by then.

        Raises:
            ServerNotReady: the engine is not running.
        """
        live = LiveStatistics(self.engine())
        self._streams.add(live)
        return live

    def unwatch(self, live: LiveStatistics) -> None:
        """Close a stream from :meth:`watch`; idempotent."""
        live.close()
        self._streams.discard(live)

    @property
    def open_streams(self) -> int:
        """Statistics streams attached to the engine now (from :meth:`watch`, not closed)."""
        return len(self._streams)

    def _ports(self) -> dict[str, int]:
        """The v2 ports served, by this process or by the headless child it switched to."""
        if self.switch is None:
            return {}
        options = self.switch.options
        return {"http": options.http_port, **({"grpc": options.grpc_port} if options.allow_grpc else {}),
                **({"metrics": options.metrics_port} if options.allow_metrics else {})}

    def status(self) -> dict:
        """``{"state", "error", "live", "ready", "version", "model_control_mode",
        "model_repository", "ports"}``: ``ports`` are the bound v2 ports (``{"http": p,
        "grpc": p, "metrics": p}``, read back from the sockets, so port 0 shows the port
        chosen), ``{}`` without ``open_ports`` or while not serving."""
        server, options = self.server, self.options
        return {
            "state": self.state,
            "error": self.error,
            "live": bool(server is not None and server.is_live()),
            "ready": bool(server is not None and self.state == RUNNING and server.is_ready()),
            "version": __version__,
            "model_control_mode": options.model_control_mode if options is not None else None,
            "model_repository": list(options.model_repository) if options is not None else [],
            "ports": self._ports() if self.state == RUNNING else {},
        }


__all__ = ["FAILED", "NOT_CONFIGURED", "RUNNING", "STARTING", "STOPPED", "STOPPING", "EngineHost"]
