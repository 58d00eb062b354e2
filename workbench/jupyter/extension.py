"""``Workbench``: the jupyter_server extension that hosts the engine inside a Jupyter server.

Enabled by ``jupyter-config/jupyter_server_config.d/workbench.json`` (``jpserver_extensions:
{"workbench.jupyter": true}``), or ``jupyter server extension enable workbench.jupyter``.
Configured as any Jupyter application, with traitlets: ``c.Workbench.model_repository =
["models"]`` in ``jupyter_server_config.py`` or ``--Workbench.model_repository=models`` on
the command line. The lifecycle follows jupyter_server's ``ExtensionApp``: settings and
handlers at initialisation, the engine started by ``_start_jupyter_server_extension`` once
Jupyter's event loop runs, and stopped (models drained and unloaded, v2 ports released) by
``stop_extension`` when Jupyter shuts down. The dashboard is served at ``{base_url}/workbench/``
(:mod:`workbench.jupyter.dashboard`) when Panel is installed (the ``ui`` extra).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
from typing import Literal, cast

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, validate

from workbench import ServerOptions
from workbench.jupyter.host import EngineHost
from workbench.jupyter.process_exit import exit_at_once_after, server_stopping
from workbench.jupyter.routes import workbench_handlers
from workbench.serving.stderr_filter import filter_stderr
from workbench.startup.restrictions import CATEGORIES, GRPC_KEY_PREFIX, restriction_value

#: ServerOptions fields that have their own trait (not accepted in ``server_options``)
_OWN_TRAITS = {
    "model_repository": "model_repository", "model_control_mode": "model_control_mode",
    "load_model": "load_model", "repository_poll_secs": "repository_poll_secs",
    "strict_model_config": "strict_model_config", "exit_on_error": "exit_on_error",
    "http_port": "http_port", "grpc_port": "grpc_port", "metrics_port": "metrics_port",
    "allow_grpc": "allow_grpc", "allow_metrics": "allow_metrics",
    "http_address": "ports_address", "grpc_address": "ports_address", "metrics_address": "ports_address",
    "http_restricted_api": "ports_restricted_api", "grpc_restricted_protocol": "ports_restricted_api",
}
#: the environment variable that hands the ports key to the kernels Jupyter starts
PORTS_KEY_ENV = "WORKBENCH_PORTS_KEY"


class Workbench(ExtensionApp):
    """The Model Serving Workbench inside Jupyter: the engine on Jupyter's event loop, its
    REST API under ``{base_url}/workbench/api/`` behind Jupyter's authentication, and, with
    ``open_ports``, the standard v2 HTTP / gRPC / metrics ports from the same process."""

    name = "workbench"
    load_other_extensions = True
    #: the engine host, made by :meth:`initialize_settings`
    host: EngineHost | None = None
    #: the dashboard (a DashboardMount), made by :meth:`initialize_settings`; None without Panel
    dashboard = None

    model_repository = List(Unicode(), help=(
        "Model repository folders (tritonserver --model-repository), or s3:// gs:// az:// URLs. "
        "Relative folders are relative to the directory Jupyter starts in. Empty: the "
        "extension starts no engine.")).tag(config=True)
    model_control_mode = Enum(["none", "explicit", "poll"], default_value="explicit", help=(
        "tritonserver --model-control-mode. 'explicit' (default here) lets the workbench load, "
        "unload and reload models and apply config edits at once; 'poll' rescans the "
        "repositories every repository_poll_secs; 'none' loads everything once.")).tag(config=True)
    load_model = List(Unicode(), default_value=["*"], help=(
        "Models loaded at start in explicit mode ('*' = every model in the repositories)."
    )).tag(config=True)
    repository_poll_secs = Float(15.0, help="Seconds between rescans in poll mode.").tag(config=True)
    strict_model_config = Bool(False, help="No auto-complete of model configs.").tag(config=True)
    exit_on_error = Bool(False, help=(
        "Refuse to start the engine when a model fails to load. False (default here): the "
        "engine serves the others and the model is UNAVAILABLE with its reason.")).tag(config=True)
    open_ports = Bool(False, help=(
        "Also serve the standard v2 HTTP, gRPC and metrics ports from the Jupyter process, so "
        "tritonclient and perf_analyzer reach the engine as they would a headless one. These "
        "ports do not use Jupyter's login: the API groups in ports_restricted_api need the "
        "ports key, and requests from web pages of other sites are refused.")).tag(config=True)
    ports_address = Unicode("127.0.0.1", help=(
        "Address the v2 ports bind with open_ports (default loopback only; '0.0.0.0' for every "
        "interface).")).tag(config=True)
    ports_restricted_api = List(Unicode(), default_value=[
        "model-repository", "shared-memory", "logging", "trace"], help=(
        "API groups of the v2 ports (tritonserver's --http-restricted-api / "
        "--grpc-restricted-protocol groups) that answer only requests carrying the ports key: "
        "header ports_key_header over HTTP, metadata 'triton-grpc-protocol-<ports_key_header>' "
        "over gRPC. Default: loading code (model-repository), touching files "
        "(shared-memory) and changing settings (logging, trace). [] = no key.")).tag(config=True)
    ports_key_header = Unicode("workbench-api-key", help=(
        "Header that carries the ports key (see ports_restricted_api).")).tag(config=True)
    ports_key = Unicode("", help=(
        "The ports key; empty (default): a new random key at each start. Readable by the "
        "signed-in user at GET workbench/api/status ('ports_key') and, in the kernels this "
        "Jupyter server starts, from the environment variable WORKBENCH_PORTS_KEY.")).tag(config=True)
    http_port = Int(8000, help="v2 HTTP port with open_ports; 0 = any free port.").tag(config=True)
    grpc_port = Int(8001, help="v2 gRPC port with open_ports; 0 = any free port.").tag(config=True)
    metrics_port = Int(8002, help="Prometheus metrics port with open_ports; 0 = any free port.").tag(config=True)
    allow_grpc = Bool(True, help="Serve gRPC with open_ports.").tag(config=True)
    allow_metrics = Bool(True, help="Serve metrics with open_ports.").tag(config=True)
    statistics_interval_s = Float(1.0, help=(
        "Seconds between two events of the live statistics stream "
        "(GET workbench/api/statistics/stream; a request may ask for 0.1 to 60).")).tag(config=True)
    dashboard_session_linger_s = Float(15.0, help=(
        "Seconds a dashboard session lives on once its browser tab is gone (closed, or "
        "disconnected); then it is destroyed and stops watching the engine.")).tag(config=True)
    exit_at_once = Bool(True, help=(
        "When the Jupyter server stops (a signal, POST /api/shutdown), end the process as "
        "soon as Jupyter's shutdown is over, without the interpreter's finalization (the "
        "frameworks' destructors: 12-28 s with the sample models). Beyond Triton.")).tag(config=True)
    server_options = Dict(help=(
        "Any other engine option, by its ServerOptions name, e.g. "
        "{'response_cache_byte_size': 1048576, 'exit_timeout_secs': 10}.")).tag(config=True)

    @validate("ports_restricted_api")
    def _known_groups(self, proposal: dict) -> list:
        unknown = [group for group in proposal["value"] if group not in CATEGORIES]
        if unknown:
            raise TraitError(f"unknown restricted api {unknown} (known: {', '.join(CATEGORIES)})")
        return proposal["value"]

    @validate("server_options")
    def _no_trait_in_server_options(self, proposal: dict) -> dict:
        for key in proposal["value"]:
            if key in _OWN_TRAITS:
                raise TraitError(f"set c.Workbench.{_OWN_TRAITS[key]} instead of server_options['{key}']")
        return proposal["value"]

    def engine_options(self) -> ServerOptions | None:
        """The engine's options from the traits; None without a model repository.

        Raises:
            ValueError: a value ServerOptions rejects (pydantic's ValidationError).
        """
        if not self.model_repository:
            return None
        restricted: list[str] = []
        if self.open_ports and self.ports_restricted_api:
            restricted = [restriction_value(self.ports_restricted_api, self.ports_key_header,
                                            self._ports_key())]
        return ServerOptions(
            **self.server_options,
            model_repository=list(self.model_repository),
            # the Enum trait holds one of ServerOptions' modes
            model_control_mode=cast('Literal["none", "explicit", "poll"]', self.model_control_mode),
            load_model=list(self.load_model),
            repository_poll_secs=self.repository_poll_secs,
            strict_model_config=self.strict_model_config,
            exit_on_error=self.exit_on_error,
            http_address=self.ports_address, http_port=self.http_port,
            grpc_address=self.ports_address, grpc_port=self.grpc_port, allow_grpc=self.allow_grpc,
            metrics_address=self.ports_address, metrics_port=self.metrics_port,
            allow_metrics=self.allow_metrics,
            http_restricted_api=restricted, grpc_restricted_protocol=restricted,
        )

    def _ports_key(self) -> str:
        """The ports key (made once per process when not configured), also put in this
        process's environment as WORKBENCH_PORTS_KEY so that kernels started later inherit it."""
        if not self.ports_key:
            self.ports_key = secrets.token_urlsafe(32)
        os.environ[PORTS_KEY_ENV] = self.ports_key
        return self.ports_key

    def ports_key_status(self) -> dict | None:
        """``{"header", "grpc_header", "value", "restricted"}`` of the v2 ports' key; None
        without open ports or without restricted groups."""
        if not (self.open_ports and self.ports_restricted_api and self.ports_key):
            return None
        return {"header": self.ports_key_header,
                "grpc_header": GRPC_KEY_PREFIX + self.ports_key_header.lower(),
                "value": self.ports_key, "restricted": list(self.ports_restricted_api)}

    def initialize_settings(self) -> None:
        """Create the engine host (not started yet) and put it in the tornado settings:
        ``workbench_host`` (:class:`EngineHost`), ``workbench_server`` (the
        :class:`~workbench.Server`, None when not configured) and ``workbench_dashboard`` (the
        dashboard's :class:`~workbench.jupyter.dashboard.DashboardMount`, None without Panel)."""
        assert self.serverapp is not None  # Jupyter calls this for a linked server app only
        _log_to(self.serverapp.log)
        try:
            self.host = EngineHost(self.engine_options(), self.open_ports)
        except ValueError as exc:
            self.log.error("workbench: invalid configuration: %s", exc)
            self.host = EngineHost(None, self.open_ports, error=f"invalid configuration: {exc}")
        if importlib.util.find_spec("panel") is not None:
            from workbench.jupyter.dashboard import DashboardMount

            self.dashboard = DashboardMount(
                self.host, self.serverapp.web_app.settings, interval_s=self.statistics_interval_s,
                session_linger_s=self.dashboard_session_linger_s)
        else:
            self.log.warning("workbench: no dashboard at workbench/ (Panel is not installed: "
                             "pip install 'workbench[ui]')")
        self.settings.update({
            "workbench_host": self.host,
            "workbench_dashboard": self.dashboard,
            "workbench_server": self.host.server,
            "workbench_statistics_interval_s": self.statistics_interval_s,
            "workbench_ports_key": self.ports_key_status(),
        })

    def initialize_handlers(self) -> None:
        """Add the workbench routes (relative to Jupyter's base URL)."""
        self.handlers.extend(workbench_handlers(dashboard=self.dashboard is not None))

    async def _start_jupyter_server_extension(self, serverapp: object) -> None:
        """Jupyter's loop runs: start the engine in the background (Jupyter serves meanwhile;
        ``GET workbench/api/status`` says ``starting`` until the models are loaded)."""
        if self.host is not None:
            self.host.begin()
        if self.dashboard is not None:
            self.dashboard.start()

    async def stop_extension(self) -> None:
        """Jupyter is stopping: close the dashboard sessions, drain and unload every model,
        release the v2 ports (also when closing the sessions failed). When the Jupyter server
        stops its process, grpc-core's "Closing acceptor" line is filtered from here on and,
        with ``exit_at_once``, the process ends right after Jupyter's shutdown
        (:mod:`workbench.jupyter.process_exit`)."""
        stopping = server_stopping(self.serverapp)
        if stopping and self.host is not None and self.host.switch is not None:  # v2 ports open
            filter_stderr()
        try:
            if self.dashboard is not None:
                await self.dashboard.stop()
        finally:
            if self.host is not None:
                await self.host.stop()
            if stopping and self.exit_at_once:
                exit_at_once_after()


def _log_to(jupyter_log: logging.Logger | None) -> None:
    """Send the engine's log lines (logger ``workbench``) to the Jupyter server's log
    handlers, in its format, unless something configured the ``workbench`` logger already."""
    engine_log = logging.getLogger("workbench")
    if jupyter_log is None or not jupyter_log.handlers or engine_log.handlers:
        return
    for handler in jupyter_log.handlers:
        engine_log.addHandler(handler)
    engine_log.setLevel(logging.INFO)
    engine_log.propagate = False  # the same handlers may also sit on the root logger


__all__ = ["Workbench"]
