"""The Headless tab: start and stop ``workbench serve`` on the current repository (the user
picks the ports), watch its health and log; write a Dockerfile and Kubernetes manifests.

The process belongs to the dashboard session that started it: closing the session (or
:meth:`HeadlessView.close`) stops it. Health and log refresh on the dashboard's tick.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import panel as pn

from workbench.deploy import DeploySpec, write_deployment
from workbench.ui.serve_process import ServeProcess, suggested_ports
from workbench.ui.store import EngineStore, error_text


class HeadlessView(pn.viewable.Viewer):
    """The Headless tab of one dashboard session; :meth:`start`, :meth:`stop`,
    :meth:`poll` and :meth:`write_deployment` are coroutines the buttons spawn."""

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.process: ServeProcess | None = None
        self._polling: asyncio.Future | None = None
        repositories = [r for r in store.server.options.model_repository if "://" not in r]
        self.repository = pn.widgets.TextInput(label="Model repository",
                                               value=repositories[0] if repositories else "")
        http, grpc, metrics = suggested_ports()
        self.http_port = pn.widgets.IntInput(label="HTTP port", value=http, start=1, end=65535)
        self.grpc_port = pn.widgets.IntInput(label="gRPC port", value=grpc, start=1, end=65535)
        self.metrics_port = pn.widgets.IntInput(label="metrics port", value=metrics, start=1, end=65535)
        self.mode = pn.widgets.Select(label="model control mode", options=["none", "explicit", "poll"])
        self.start_button = pn.widgets.Button(label="Start workbench serve", color="primary")
        self.stop_button = pn.widgets.Button(label="Stop", color="warning", disabled=True)
        self.health = pn.pane.Markdown("**not running**")
        self.log = pn.pane.Str("", sizing_mode="stretch_width")
        self.out_dir = pn.widgets.TextInput(label="Deployment folder", placeholder="deploy/")
        self.deploy_name = pn.widgets.TextInput(label="name", value=DeploySpec.name)
        self.image = pn.widgets.TextInput(label="image", value=DeploySpec.image)
        self.max_replicas = pn.widgets.IntInput(label="max replicas", value=DeploySpec.max_replicas, start=1)
        self.queue_target = pn.widgets.IntInput(label="HPA queue time target (µs)",
                                                value=DeploySpec.queue_time_target_us, start=1)
        self.deploy_button = pn.widgets.Button(label="Write Dockerfile + manifests")
        self.written = pn.pane.Markdown("")
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.start_button.on_click(lambda _e: self.store.spawn(self.start()))
        self.stop_button.on_click(lambda _e: self.store.spawn(self.stop()))
        self.deploy_button.on_click(lambda _e: self.store.spawn(self.write_deployment()))

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("### Serve headless"),
            pn.Row(self.repository, self.mode),
            pn.Row(self.http_port, self.grpc_port, self.metrics_port),
            pn.Row(self.start_button, self.stop_button), self.health,
            # the log tail scrolls inside its own box (a long tail never covers what follows)
            pn.Column(self.log, height=300, scroll=True, sizing_mode="stretch_width"),
            pn.pane.Markdown("### Deploy (Docker + Kubernetes)"),
            pn.Row(self.out_dir, self.deploy_name, self.image),
            pn.Row(self.max_replicas, self.queue_target, self.deploy_button),
            self.written, self.error, sizing_mode="stretch_width")

    async def start(self) -> None:
        """Start ``workbench serve`` with the chosen repository, ports and mode (one process
        at a time)."""
        if self.process is not None and self.process.running:
            self.show_error(f"already running (pid {self.process.pid}): stop it first")
            return
        self.error.visible = False
        try:
            self.process = await asyncio.to_thread(
                ServeProcess, [self.repository.value], self.http_port.value, self.grpc_port.value,
                self.metrics_port.value, self.mode.value)
        except OSError as exc:
            self.show_error(error_text(exc))
            return
        self.start_button.disabled, self.stop_button.disabled = True, False
        await self.poll()

    async def stop(self) -> None:
        """Stop it (SIGTERM: in-flight requests drain) and show its exit status."""
        if self.process is None:
            return
        await asyncio.to_thread(self.process.stop)
        self.start_button.disabled, self.stop_button.disabled = False, True
        await self.poll()

    async def poll(self) -> str:
        """Refresh health and log tail; returns the health (see ``ServeProcess.health``)."""
        if self.process is None:
            return ""
        health = await self.process.health()
        process = self.process
        self.health.object = (f"**{health}**: pid {process.pid}, HTTP "
                              f"{process.http_address}:{process.http_port}")
        self.log.object = process.log_tail()
        if not process.running:
            self.start_button.disabled, self.stop_button.disabled = False, True
        return health

    def tick(self) -> None:
        """The dashboard's tick: poll while a process exists (one poll at a time)."""
        if self.process is None or (self._polling is not None and not self._polling.done()):
            return
        self._polling = self.store.spawn(self.poll())

    async def write_deployment(self) -> list[Path]:
        """Write the Dockerfile, ``k8s/*.yaml`` and a copy of the repository into the chosen
        folder (``workbench deploy``); list what was written, or show the error."""
        try:
            spec = DeploySpec(name=self.deploy_name.value, image=self.image.value,
                              max_replicas=self.max_replicas.value,
                              queue_time_target_us=self.queue_target.value)
            if not self.out_dir.value:
                raise ValueError("choose a deployment folder")
            written = await asyncio.to_thread(write_deployment, spec, Path(self.repository.value),
                                              Path(self.out_dir.value))
        except (ValueError, OSError) as exc:
            self.show_error(f"{type(exc).__name__}: {exc}")
            return []
        self.error.visible = False
        self.written.object = "Written:\n" + "\n".join(f"- `{p}`" for p in written)
        return written

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error pane."""
        self.error.object, self.error.visible = text, True

    def close(self) -> None:
        """Stop the process this session started, if any (blocking, up to 30 s)."""
        if self.process is not None and self.process.running:
            self.process.stop()


__all__ = ["HeadlessView"]
