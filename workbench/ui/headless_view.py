"""The Headless tab: start and stop ``workbench serve`` on the current repository (the user
picks the ports), watch its health and log; write a Dockerfile and Kubernetes manifests.

The process belongs to the dashboard session that started it: closing the session (or
:meth:`HeadlessView.close`) stops it. Health and log refresh on the dashboard's tick; the log
box follows its newest line while the user has not scrolled up (as a terminal does).

Every value shown is the effective one (the deployment folder is a real path, never a
placeholder); each action clears its section's banners first; a button that cannot run is
disabled; errors are sentences, never a Python exception name. The coroutines change Panel
objects only, never Bokeh models directly: Panel routes a change made outside the session
document's lock through ``doc.add_next_tick_callback``.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from pathlib import Path

import panel as pn

from workbench.deploy import DeploySpec, PythonRequirements, python_requirements, write_deployment
from workbench.deploy.writer import check_folders
from workbench.serving.switch import (
    HEADLESS,
    IN_PROCESS,
    SwitchError,
    key_environment,
    switch_for,
    systemd_unit,
)
from workbench.ui.serve_process import DEFAULT_PORTS, ServeProcess, suggested_ports, taken_ports
from workbench.ui.store import EngineStore, Spawned

log = logging.getLogger(__name__)

#: lines of the process's log shown in the log box
LOG_TAIL_LINES = 40
#: the log box follows new lines while it is scrolled to within this many pixels of its end
FOLLOW_LIMIT_PX = 80


def default_deployment_folder(repository: str) -> str:
    """An absolute folder for the deployment files: ``./deploy`` of the process's working
    directory (the Jupyter or notebook root), or ``<repository>-deploy`` beside the repository
    when ``./deploy`` would be inside it."""
    folder = Path.cwd() / "deploy"
    if repository:
        repo = Path(repository).resolve()
        if folder.resolve().is_relative_to(repo):
            folder = repo.parent / f"{repo.name}-deploy"
    return str(folder)


def user_text(exc: BaseException) -> str:
    """A sentence for an error pane: the message of ``exc`` without its Python type (an
    ``OSError``'s ``strerror`` and file name)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: '{exc.filename}'" if exc.filename else exc.strerror
    return str(exc) or "an unexpected error (see the server's log)"


def _ports_note(proposed: tuple[int, int, int]) -> str:
    """What the form says under the proposed ports: nothing when Triton's 8000/8001/8002 are
    free, else which of them another listener holds (the dashboard's own engine with its v2
    ports open, or another server) and the free ones proposed instead."""
    taken = taken_ports(DEFAULT_PORTS)
    if not taken:
        return ""
    names = ", ".join(str(port) for port in taken)
    if proposed == DEFAULT_PORTS:  # no free trio was found
        return f"Taken: {names} (another server listens there). Choose free ports."
    return (f"Taken: {names} (this dashboard's engine or another server listens there); "
            f"proposing {proposed[0]}, {proposed[1]} and {proposed[2]}, which are free.")


class HeadlessView(pn.viewable.Viewer):
    """The Headless tab of one dashboard session; :meth:`start`, :meth:`stop`,
    :meth:`poll` and :meth:`write_deployment` are coroutines the buttons spawn."""

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.process: ServeProcess | None = None
        self._polling: Spawned | None = None
        repositories = [r for r in store.server.options.model_repository if "://" not in r]
        repository = repositories[0] if repositories else ""
        self.repository = pn.widgets.TextInput(label="Model repository", value=repository)
        http, grpc, metrics = suggested_ports()
        #: which of Triton's ports were taken when the form proposed others
        self.ports_note = pn.pane.Markdown(_ports_note((http, grpc, metrics)),
                                           css_classes=["workbench-ports-note"])
        self.http_port = pn.widgets.IntInput(label="HTTP port", value=http, start=1, end=65535)
        self.grpc_port = pn.widgets.IntInput(label="gRPC port", value=grpc, start=1, end=65535)
        self.metrics_port = pn.widgets.IntInput(label="metrics port", value=metrics, start=1, end=65535)
        self.mode = pn.widgets.Select(label="model control mode", options=["none", "explicit", "poll"])
        self.start_button = pn.widgets.Button(label="Start workbench serve", color="primary")
        self.stop_button = pn.widgets.Button(label="Stop", color="warning", disabled=True)
        self.health = pn.pane.Markdown("**not running**")
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.log = pn.pane.Str("", sizing_mode="stretch_width")
        # the tail scrolls inside its own box (a long tail never covers what follows); a new
        # child per change lets the box follow the newest line (Panel's auto-scroll)
        self.log_box = pn.Column(self.log, height=300, scroll=True, sizing_mode="stretch_width",
                                 auto_scroll_limit=FOLLOW_LIMIT_PX,
                                 css_classes=["workbench-headless-log"])
        self.out_dir = pn.widgets.TextInput(label="Deployment folder",
                                            value=default_deployment_folder(repository))
        self.deploy_name = pn.widgets.TextInput(label="name", value=DeploySpec.name)
        self.image = pn.widgets.TextInput(label="image", value=DeploySpec.image)
        self.max_replicas = pn.widgets.IntInput(label="max replicas", value=DeploySpec.max_replicas, start=1)
        self.queue_target = pn.widgets.IntInput(label="HPA queue time target (µs)",
                                                value=DeploySpec.queue_time_target_us, start=1)
        self.deploy_button = pn.widgets.Button(label="Write Dockerfile + manifests")
        self.written = pn.pane.Markdown("")
        self.deploy_warnings = pn.pane.Alert("", alert_type="warning", visible=False)
        self.deploy_error = pn.pane.Alert("", alert_type="danger", visible=False)
        #: the switch of the v2 ports this process serves (None: it serves none)
        self.switch = switch_for(store.engine)
        self.switch_button = pn.widgets.Button(label="Switch to headless", color="primary")
        self.back_button = pn.widgets.Button(label="Switch back", color="warning")
        self.switch_state = pn.pane.Markdown("", css_classes=["workbench-switch-state"])
        self.switch_command = pn.pane.Markdown("", css_classes=["workbench-switch-command"],
                                               sizing_mode="stretch_width")
        self.switch_error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.switch_button.on_click(self.store.starter(self.to_headless))
        self.back_button.on_click(self.store.starter(self.switch_back))
        self._show_switch()
        self._busy = False  # a start, stop or deployment is under way
        self.start_button.on_click(self.store.starter(self.start))
        self.stop_button.on_click(self.store.starter(self.stop))
        self.deploy_button.on_click(self.store.starter(self.write_deployment))
        for widget in (self.repository, self.out_dir):
            # a paste changes both at once: the watcher gets one event per changed parameter
            widget.param.watch(lambda *_events: self._enable(), ["value", "value_input"])
        self._enable()

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("### Switch the v2 ports to headless"),
            pn.Row(self.switch_button, self.back_button), self.switch_state, self.switch_error,
            self.switch_command,
            pn.pane.Markdown("### Serve headless"),
            pn.Row(self.repository, self.mode),
            pn.Row(self.http_port, self.grpc_port, self.metrics_port), self.ports_note,
            pn.Row(self.start_button, self.stop_button), self.health, self.error,
            self.log_box,
            pn.pane.Markdown("### Deploy (Docker + Kubernetes)"),
            pn.Row(self.out_dir, self.deploy_name, self.image),
            pn.Row(self.max_replicas, self.queue_target, self.deploy_button),
            self.deploy_error, self.deploy_warnings, self.written, sizing_mode="stretch_width")

    @staticmethod
    def _missing(*widgets: pn.widgets.IntInput) -> str:
        """"enter the <label>" for the first number field left empty (its value is None
        once a person clears it); "" when none is."""
        empty = next((widget for widget in widgets if widget.value is None), None)
        return "" if empty is None else f"enter the {empty.name}"

    @staticmethod
    def _text(widget: pn.widgets.TextInput) -> str:
        """What the input holds: the text being typed, else its value."""
        return (widget.value_input or widget.value or "").strip()

    def _enable(self) -> None:
        """Enable what can run now: Start with a repository and no running process, Stop with
        one, Write with a repository and a folder, nothing while an action is under way."""
        running = self.process is not None and self.process.running
        has_repository = bool(self._text(self.repository))
        self.start_button.disabled = self._busy or running or not has_repository
        self.stop_button.disabled = self._busy or not running
        self.deploy_button.disabled = self._busy or not (has_repository and self._text(self.out_dir))

    def _set_log(self, text: str) -> None:
        if text != self.log.object:
            self.log = pn.pane.Str(text, sizing_mode="stretch_width")
            self.log_box.objects = [self.log]

    async def start(self) -> None:
        """Start ``workbench serve`` with the chosen repository, ports and mode (one process
        at a time)."""
        self.error.visible = False
        if self.process is not None and self.process.running:
            self.show_error(f"already running (pid {self.process.pid}): stop it first")
            return
        repository = (self.repository.value or "").strip()
        if not repository:
            self.show_error("choose a model repository")
            return
        http, grpc, metrics = self.http_port.value, self.grpc_port.value, self.metrics_port.value
        if http is None or grpc is None or metrics is None:
            self.show_error(self._missing(self.http_port, self.grpc_port, self.metrics_port))
            return
        self._busy = True
        self._enable()
        self.health.object = "**starting**"
        try:
            self.process = await asyncio.to_thread(
                ServeProcess, [repository], http, grpc, metrics, self.mode.value)
        except OSError as exc:
            self.health.object = "**not running**"
            self.show_error(f"could not start workbench serve: {user_text(exc)}")
            return
        finally:
            self._busy = False
            self._enable()
        self._set_log("")
        await self.poll()

    async def stop(self) -> None:
        """Stop it (SIGTERM: in-flight requests drain) and show its exit status."""
        self.error.visible = False
        if self.process is None:
            return
        self._busy = True
        self._enable()
        self.health.object = f"**stopping**: pid {self.process.pid}"
        try:
            await asyncio.to_thread(self.process.stop)
        finally:
            self._busy = False
            self._enable()
        await self.poll()

    async def poll(self) -> str:
        """Refresh health and log tail; returns the health (see ``ServeProcess.health``)."""
        if self.process is None:
            return ""
        process = self.process
        health = await process.health()
        if process is not self.process or self._busy:
            return health  # a start or stop began meanwhile: it shows its own state
        self.health.object = (f"**{health}**: pid {process.pid}, HTTP "
                              f"{process.http_address}:{process.http_port}")
        self._set_log(process.log_tail(LOG_TAIL_LINES))
        self._enable()
        return health

    def _show_switch(self) -> None:
        """The switch's state, the command line it ran (and a systemd unit) and which of its
        buttons can run now."""
        switch = self.switch
        if switch is None:
            self.switch_state.object = ("The switch needs the v2 ports served by this process "
                                        "(the Jupyter server with `c.Workbench.open_ports = True`).")
            self.switch_button.disabled = self.back_button.disabled = True
            return
        ports = f"HTTP {switch.options.http_port}" + (
            f", gRPC {switch.options.grpc_port}" if switch.options.allow_grpc else "") + (
            f", metrics {switch.options.metrics_port}" if switch.options.allow_metrics else "")
        served = (f"the headless `workbench serve` (pid {switch.child.pid})"
                  if switch.state == HEADLESS and switch.child is not None else "this process's engine")
        state = f"**{switch.state}**: {ports} served by {served}"
        child = switch.child
        if switch.state == HEADLESS and child is not None and not child.running:
            state = (f"**headless, but `workbench serve` exited ({child.returncode})**: {ports} "
                     "are not served; switch back to serve them from this process")
        if switch.steps:
            state += "\n\n" + "\n".join(f"- {step}" for step in switch.steps)
        if self.switch_state.object != state:
            self.switch_state.object = state
        self.switch_button.disabled = switch.state != IN_PROCESS
        self.back_button.disabled = switch.state != HEADLESS
        if switch.command:
            command = shlex.join(switch.command)
            unit = systemd_unit(switch.command, switch.options.exit_timeout_secs,
                                key_file=bool(key_environment(switch.options)))
            text = (
                f"Command line it ran (for a service file):\n\n```\n{command}\n```\n\n"
                f"A systemd unit:\n\n```ini\n{unit}\n```")
            if self.switch_command.object != text:
                self.switch_command.object = text

    async def to_headless(self) -> None:
        """Hand the v2 ports to a headless ``workbench serve`` (:meth:`PortSwitch.to_headless
        <workbench.serving.switch.PortSwitch.to_headless>`); show its command line."""
        await self._switch(True)

    async def switch_back(self) -> None:
        """Serve the v2 ports from this process again and stop the headless one."""
        await self._switch(False)

    async def _switch(self, headless: bool) -> None:
        self.switch_error.visible = False
        if self.switch is None:
            return
        self.switch_button.disabled = self.back_button.disabled = True
        task = asyncio.ensure_future(self.switch.to_headless() if headless else self.switch.back())
        try:
            while not task.done():  # the page follows the steps
                self._show_switch()
                await asyncio.wait([task], timeout=0.25)
            task.result()
        except SwitchError as exc:
            self.switch_error.object, self.switch_error.visible = str(exc), True
        except Exception as exc:  # a bug: logged with its traceback, shown as a sentence
            log.error("the switch failed", exc_info=exc)
            self.switch_error.object, self.switch_error.visible = f"switch failed: {user_text(exc)}", True
        finally:
            self._show_switch()

    def tick(self) -> None:
        """The dashboard's tick: the switch's state; poll while a process exists (one poll
        at a time)."""
        if self.switch is not None and self.switch.state in (IN_PROCESS, HEADLESS):
            self._show_switch()
        if self.process is None or (self._polling is not None and not self._polling.done()):
            return
        self._polling = self.store.spawn(self.poll())

    async def write_deployment(self) -> list[Path]:
        """Write the Dockerfile, ``requirements-models.txt``, ``k8s/*.yaml`` and a copy of the
        repository into the chosen folder (``workbench deploy``); list what was written and
        the warnings about the Python-backend models' imports, or show the error."""
        self.deploy_error.visible = self.deploy_warnings.visible = False
        self.written.object = self.deploy_warnings.object = ""
        folder, repository = (self.out_dir.value or "").strip(), (self.repository.value or "").strip()
        if not folder or not repository:
            self.show_deploy_error("choose a deployment folder" if not folder
                                   else "choose a model repository")
            return []
        max_replicas, queue_target = self.max_replicas.value, self.queue_target.value
        if max_replicas is None or queue_target is None:
            self.show_deploy_error(self._missing(self.max_replicas, self.queue_target))
            return []
        self._busy = True
        self._enable()
        self.written.object = f"writing the deployment into `{folder}` …"
        try:
            spec = DeploySpec(name=self.deploy_name.value or "", image=self.image.value or "",
                              max_replicas=max_replicas, queue_time_target_us=queue_target)
            repo, out = check_folders(Path(repository), Path(folder))
            requirements = await asyncio.to_thread(python_requirements, repo)
            written = await asyncio.to_thread(write_deployment, spec, repo, out,
                                              requirements=requirements)
        except (ValueError, OSError) as exc:
            self.written.object = ""
            self.show_deploy_error(f"not written: {user_text(exc)}")
            return []
        except Exception as exc:  # a bug: logged with its traceback, shown as a sentence
            log.error("writing a deployment failed", exc_info=exc)
            self.written.object = ""
            self.show_deploy_error(f"not written: {user_text(exc)}")
            return []
        finally:
            self._busy = False
            self._enable()
        self.written.object = "\n".join([f"Written into `{out}`:",
                                         *(f"- `{p.relative_to(out)}`" for p in written),
                                         _packages_line(requirements)])
        if requirements.warnings:
            self.deploy_warnings.object = "**Check before building:**\n\n" + "\n".join(
                f"- {warning}" for warning in requirements.warnings)
            self.deploy_warnings.visible = True
        return written

    def show_error(self, text: str) -> None:
        """Show ``text`` in the serve section's error pane."""
        self.error.object, self.error.visible = text, True

    def show_deploy_error(self, text: str) -> None:
        """Show ``text`` in the deploy section's error pane."""
        self.deploy_error.object, self.deploy_error.visible = text, True

    def close(self) -> None:
        """Stop the process this session started, if any (blocking, up to 30 s)."""
        if self.process is not None and self.process.running:
            self.process.stop()


def _packages_line(requirements: PythonRequirements) -> str:
    if not requirements.models:
        return "\nNo Python-backend model: the image needs no package beyond workbench's."
    lines = requirements.requirement_lines()
    found = ", ".join(f"`{line.split('  #')[0]}`" for line in lines) or "none"
    return (f"\nPackages the Python-backend models import (`requirements-models.txt`): {found}"
            + ("; torch from the CPU wheel index" if requirements.needs_torch else ""))


__all__ = [
    "FOLLOW_LIMIT_PX",
    "LOG_TAIL_LINES",
    "HeadlessView",
    "default_deployment_folder",
    "user_text",
]
