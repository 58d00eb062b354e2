"""The switch to headless: a ``workbench serve`` child takes over the v2 ports of an engine
hosted in another process (the Jupyter server), and back, without a failed request or a
refused connection.

Both sides listen on the same ports with ``SO_REUSEPORT`` (the hosted engine binds them so
from the start, after checking that they are free: :func:`~workbench.serving.ports.
switchable_options`; the child gets ``--reuse-http-port`` and its two siblings), and
:mod:`workbench.serving.reuseport` steers the kernel's choice between the two listeners:

To headless (:meth:`PortSwitch.to_headless`): new connections stay on the engine while the
child starts and loads its models; once it prints ``Started HTTPService``, they go to the
child, whose ``/v2/health/ready`` must answer 200 on a fresh connection; the engine's accept
queues drain; then its listeners close (:meth:`OpenPorts.stop_accepting
<workbench.serving.ports.OpenPorts.stop_accepting>`: in-flight requests finish, a request on a
keep-alive connection gets ``Connection: close``, gRPC connections get GOAWAY after the
grace), so clients reconnect to the child. The engine stays loaded: the dashboard keeps
working on it, and the switch back needs no reload.

Back (:meth:`PortSwitch.back`): the engine binds and serves the ports again, new connections
go to it (its ``/v2/health/ready`` answers 200 on a fresh connection), the child's queues
drain, then the child gets SIGTERM and drains as ``workbench serve`` does.

Tritonserver has no such switch; this goes beyond it (docs/headless-switch.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import sys
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

from workbench import Server, ServerOptions
from workbench.serving.ports import OpenPorts, bind_ports
from workbench.serving.reuseport import NEWER, OLDER, connections, inode, own_inodes, steer, wait_queues_empty
from workbench.serving.serve_process import ServeProcess, ready_code

log = logging.getLogger("workbench")

#: switch states
IN_PROCESS, TO_HEADLESS, HEADLESS, TO_IN_PROCESS = (
    "in-process", "switching to headless", "headless", "switching back")
#: seconds the child may take to load its models and serve
START_TIMEOUT_S = 300.0
#: the line ``workbench serve`` prints once its ports serve (Triton's)
SERVING_LINE = "Started HTTPService at"

_SWITCHES: weakref.WeakKeyDictionary[Server, PortSwitch] = weakref.WeakKeyDictionary()


class SwitchError(Exception):
    """A switch refused or failed; the message is a sentence for the page. The ports keep
    serving where they served before."""


def switch_for(server: Server) -> PortSwitch | None:
    """The switch of the host serving ``server``'s v2 ports (None: no host serves them in
    this process, e.g. a notebook's engine or a Jupyter server without ``open_ports``)."""
    return _SWITCHES.get(server)


def _local(address: str) -> str:
    """Where to reach a listener bound to ``address`` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(address, address)


def serve_command(options: ServerOptions, load_models: Iterable[str] = ()) -> list[str]:
    """The ``workbench serve`` command line serving what ``options`` serve, on the same
    addresses and ports, with the ``--reuse-*-port`` flags (so either side can take the
    ports over); ``load_models``: ``--load-model`` names (explicit mode; each once, in order).
    A local repository is written as an absolute path, so the line runs from any folder (a
    service file's)."""
    command = [sys.executable, "-m", "workbench.hosts.cli", "serve",
               *(f"--model-repository={_absolute(repository)}" for repository in options.model_repository),
               f"--model-control-mode={options.model_control_mode}",
               *(f"--load-model={name}" for name in dict.fromkeys(load_models)),
               f"--http-address={options.http_address}", f"--http-port={options.http_port}",
               "--reuse-http-port=true"]
    if options.allow_grpc:
        command += [f"--grpc-address={options.grpc_address}", f"--grpc-port={options.grpc_port}",
                    "--reuse-grpc-port=true"]
        if options.grpc_max_connection_age_ms:
            command.append(f"--grpc-max-connection-age-ms={options.grpc_max_connection_age_ms}")
    else:
        command.append("--allow-grpc=false")
    if options.allow_metrics:
        command += [f"--metrics-address={options.metrics_address}",
                    f"--metrics-port={options.metrics_port}", "--reuse-metrics-port=true"]
    else:
        command.append("--allow-metrics=false")
    defaults = ServerOptions.model_fields
    if options.strict_readiness != defaults["strict_readiness"].default:
        command.append(f"--strict-readiness={str(options.strict_readiness).lower()}")
    if options.exit_timeout_secs != defaults["exit_timeout_secs"].default:
        command.append(f"--exit-timeout-secs={options.exit_timeout_secs:g}")
    if options.log_verbose:
        command.append(f"--log-verbose={options.log_verbose}")
    return command


def _absolute(repository: str) -> str:
    """A local repository folder as an absolute path; a remote one (``s3://`` ...) as given."""
    return repository if "://" in repository else str(Path(repository).resolve())


def key_environment(options: ServerOptions) -> dict[str, str]:
    """The restricted-API settings of ``options`` as ``WORKBENCH_*`` environment variables
    (JSON lists, as the settings read them): how the child gets the ports key without it
    showing on a command line (``ps``, the page)."""
    env = {}
    if options.http_restricted_api:
        env["WORKBENCH_HTTP_RESTRICTED_API"] = json.dumps(options.http_restricted_api)
    if options.grpc_restricted_protocol:
        env["WORKBENCH_GRPC_RESTRICTED_PROTOCOL"] = json.dumps(options.grpc_restricted_protocol)
    return env


def systemd_unit(command: list[str], exit_timeout_s: float, key_file: bool = False) -> str:
    """A systemd service running ``command`` (SIGTERM drains; ``TimeoutStopSec`` leaves the
    drain its ``--exit-timeout-secs``); ``key_file``: the restricted-API settings come from an
    ``EnvironmentFile`` (:func:`key_environment`'s variables)."""
    key = (["# the ports key, never on the command line: /etc/workbench/ports-key.env (mode 0600) holds",
            "# WORKBENCH_HTTP_RESTRICTED_API='[\"model-repository:<header>=<key>\"]' and",
            "# WORKBENCH_GRPC_RESTRICTED_PROTOCOL='[\"model-repository:<header>=<key>\"]' (the",
            "# --http-restricted-api / --grpc-restricted-protocol values, as JSON lists)",
            "EnvironmentFile=/etc/workbench/ports-key.env"] if key_file else [])
    return "\n".join([
        "[Unit]", "Description=workbench serve (Triton-compatible inference server)",
        "After=network-online.target", "", "[Service]", *key, f"ExecStart={shlex.join(command)}",
        "KillSignal=SIGTERM", f"TimeoutStopSec={int(exit_timeout_s) + 15}", "Restart=on-failure", "",
        "[Install]", "WantedBy=multi-user.target"])


class PortSwitch:
    """Moves the v2 ports of ``server`` between its host's listeners (``ports``) and a
    headless ``workbench serve`` child; one move at a time.

    Args:
        server: the running engine.
        options: its options, the ports bound (port 0 resolved) and the ``reuse_*_port`` set
            (:func:`~workbench.serving.ports.switchable_options`).
        ports: the host's serving listeners.

    Attributes:
        state: :data:`IN_PROCESS`, :data:`TO_HEADLESS`, :data:`HEADLESS` or :data:`TO_IN_PROCESS`.
        ports: the host's listeners while they serve (None while headless).
        child: the headless ``workbench serve`` (None in process).
        command: the child's command line (the last one run).
        error: why the last switch failed ("" when it did not).
        steps: what the last switch did, one line per step, for the page.
    """

    def __init__(self, server: Server, options: ServerOptions, ports: OpenPorts) -> None:
        self.server = server
        self.options = options
        self.ports: OpenPorts | None = ports
        self.child: ServeProcess | None = None
        self.state = IN_PROCESS
        self.command: list[str] = []
        self.error = ""
        self.steps: list[str] = []
        self._lock = asyncio.Lock()
        _SWITCHES[server] = self

    def _port_numbers(self) -> list[int]:
        options = self.options
        return ([options.http_port] + ([options.grpc_port] if options.allow_grpc else [])
                + ([options.metrics_port] if options.allow_metrics else []))

    def _step(self, text: str) -> None:
        self.steps.append(text)
        log.info("switch: %s", text)

    def _steer_own(self, ports: OpenPorts, index: int) -> set[int]:
        """Steer every port's new connections to listener ``index``; returns the inodes of
        the host's own listeners."""
        socks = ports.bound.listeners()
        try:
            for sock in socks:
                steer(sock, index)
            return {inode(sock) for sock in socks}
        finally:
            ports.bound.release(socks)

    async def _drain_queues(self, own: set[int], others: bool) -> None:
        for port in self._port_numbers():
            if not await wait_queues_empty(port, own, others=others):
                log.warning("switch: connections still queued on port %d after 10 s", port)

    async def _grpc_connections_leave(self, others: bool) -> None:
        """Wait until the gRPC connections of the side that stops (``others``: not this
        process) are gone: each gets GOAWAY at its ``grpc_max_connection_age_ms`` and its
        client reconnects to the side that serves (a stopping gRPC server would cancel the
        calls a busy connection sends meanwhile)."""
        options = self.options
        if not options.allow_grpc:
            return
        deadline = time.monotonic() + options.grpc_max_connection_age_ms * 1.2 / 1000 + 2.0
        while time.monotonic() < deadline:
            mine = own_inodes()
            if not {ino for ino in connections(options.grpc_port) if (ino in mine) != others}:
                return
            await asyncio.sleep(0.05)
        log.warning("switch: gRPC connections still open on the side that stops")

    async def to_headless(self) -> None:
        """Start the headless child on the same ports and hand them over (module docstring).

        Raises:
            SwitchError: not in process now, or the child did not
                start, serve or answer ready (it is stopped; the engine kept serving).
        """
        async with self._lock:
            if self.state != IN_PROCESS or self.ports is None:
                raise SwitchError(f"cannot switch to headless: the ports are {self.state}")
            self.state, self.error, self.steps = TO_HEADLESS, "", []
            ports = self.ports
            try:
                self._steer_own(ports, OLDER)  # new connections stay here while the child starts
                loaded = ([row["name"] for row in await self.server.repository_index(ready=True)]
                          if self.options.model_control_mode == "explicit" else [])
                self.command = serve_command(self.options, loaded)
                child = await asyncio.to_thread(
                    ServeProcess, [], http_port=self.options.http_port,
                    http_address=_local(self.options.http_address), command=self.command,
                    env=key_environment(self.options))
                self.child = child
                self._step(f"started workbench serve (pid {child.pid})")
                await self._wait_serving(child)
                own = self._steer_own(ports, NEWER)
                if await child.health_code() != 200:
                    self._steer_own(ports, OLDER)
                    raise SwitchError("workbench serve is not ready (GET /v2/health/ready did not "
                                      "answer 200): see its log")
                self._step("workbench serve is ready; new connections go to it")
                await self._drain_queues(own, others=False)
                await self._grpc_connections_leave(others=False)
                await ports.stop_accepting()
                await ports.close()
            except BaseException as exc:
                await self._abandon_child()
                self.state = IN_PROCESS
                self.error = str(exc) if isinstance(exc, SwitchError) else f"switch failed: {exc}"
                if isinstance(exc, (SwitchError, OSError)):
                    raise SwitchError(self.error) from exc
                raise
            self.ports = None
            self.state = HEADLESS
            self._step("the in-process listeners are closed (in-flight requests answered)")

    async def _wait_serving(self, child: ServeProcess) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not child.printed(SERVING_LINE):
            if not child.running:
                raise SwitchError(f"workbench serve exited ({child.returncode}) before serving: see its log")
            if time.monotonic() > deadline:
                raise SwitchError(f"workbench serve did not serve within {START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.05)

    async def _abandon_child(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            await asyncio.sleep(0.2)  # connections steered to it meanwhile are accepted
            await asyncio.to_thread(child.stop, self.options.exit_timeout_secs + 5)

    async def back(self) -> int:
        """Serve the ports from the engine again, then stop the child (SIGTERM: it drains).

        Returns:
            The child's exit status (0: it drained and exited cleanly).

        Raises:
            SwitchError: not headless now, or a port could not be bound again (the child
                keeps serving).
        """
        async with self._lock:
            if self.state != HEADLESS:
                raise SwitchError(f"cannot switch back: the ports are {self.state}")
            self.state, self.error, self.steps = TO_IN_PROCESS, "", []
            bound = bind_ports(self.server, self.options)
            if bound is None:
                self.state, self.error = HEADLESS, "cannot bind the v2 ports again (see the log)"
                raise SwitchError(self.error)
            ports = OpenPorts(self.server, self.options, bound)
            try:
                self._steer_own(ports, OLDER)  # the child keeps new connections until we serve
                await ports.start()
                own = self._steer_own(ports, NEWER)
                if await ready_code(_local(self.options.http_address), self.options.http_port) != 200:
                    raise SwitchError("the in-process engine is not ready (GET /v2/health/ready)")
            except BaseException as exc:
                self._steer_own(ports, OLDER)
                await ports.close()
                self.state = HEADLESS
                self.error = str(exc) if isinstance(exc, SwitchError) else f"switch back failed: {exc}"
                raise SwitchError(self.error) from exc
            self.ports = ports
            self._step("the in-process listeners serve again; new connections go to them")
            await self._drain_queues(own, others=True)
            await self._grpc_connections_leave(others=True)
            child, self.child = self.child, None
            status = 0
            if child is not None:
                status = await asyncio.to_thread(child.stop, self.options.exit_timeout_secs + 5)
                self._step(f"workbench serve drained and exited ({status})" if status == 0
                           else f"workbench serve had exited ({status})")
            self.state = IN_PROCESS
            return status

    async def stop_accepting(self) -> None:
        """The host stops: wait for a switch under way, refuse new connections (in process),
        or stop the child (headless). Idempotent."""
        async with self._lock:
            if self.ports is not None:
                await self.ports.stop_accepting()
            elif self.child is not None:
                child, self.child = self.child, None
                await asyncio.to_thread(child.stop, self.options.exit_timeout_secs + 5)

    async def close(self) -> None:
        """Release the ports (after :meth:`stop_accepting` and the engine's drain)."""
        if self.ports is not None:
            await self.ports.close()


__all__ = ["HEADLESS", "IN_PROCESS", "SERVING_LINE", "TO_HEADLESS", "TO_IN_PROCESS", "PortSwitch",
           "SwitchError", "key_environment", "serve_command", "switch_for",
           "systemd_unit"]
