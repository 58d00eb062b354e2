"""The dashboard's "Attach to a server" bar: the URL of a v2 server (a headless
``workbench serve``, replicas of one as a comma-separated list, a ``tritonserver``), optional
``/metrics`` URLs, and headers for a restricted API.

Headers are typed into a password field and live only in this session's memory (the
:class:`~workbench.remote.RemoteServer`'s client): never written into a notebook, a file or
a log, and the field is emptied once attached. Attaching swaps every tab onto the server
(:meth:`workbench.ui.app.Dashboard.attach`); "Back to this engine" returns to the engine in
this process where there is one. The status line says, once every few beats, whether each
replica is live and ready (``/v2/health/*``).
"""

from __future__ import annotations

from collections.abc import Callable

import panel as pn

from workbench.remote import RemoteServer
from workbench.remote.client import parse_urls

#: beats between two health reads of the attached server
HEALTH_EVERY = 5


def parse_headers(text: str) -> dict[str, str]:
    """``"Name: value; Other: value"`` (or one per line) -> a dict.

    Raises:
        ValueError: an entry without ``:`` or with an empty name.
    """
    headers = {}
    for item in text.replace("\n", ";").split(";"):
        if not item.strip():
            continue
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            raise ValueError("headers are 'Name: value' entries separated by ';' (one is not)")
        headers[name.strip()] = value.strip()
    return headers


class AttachBar(pn.viewable.Viewer):
    """The attach controls of one dashboard session.

    Args:
        attach: called with the new :class:`RemoteServer` when Attach is clicked.
        detach: called by "Back to this engine"; None: there is no engine in this process.
    """

    def __init__(self, attach: Callable[[RemoteServer], None], detach: Callable[[], None] | None,
                 **params) -> None:
        super().__init__(**params)
        self._attach, self._detach = attach, detach
        self.url = pn.widgets.TextInput(
            label="Attach to a server", width=360, css_classes=["workbench-attach-url"],
            placeholder="http://host:8000 (replicas: comma-separated)")
        self.metrics = pn.widgets.TextInput(label="/metrics URLs (optional)", width=300,
                                            placeholder="http://host:8002/metrics")
        self.headers = pn.widgets.PasswordInput(label="Headers (optional, this session only)", width=260,
                                                placeholder="Name: value; Other: value")
        self.attach_button = pn.widgets.Button(label="Attach", color="primary", align="end")
        self.detach_button = pn.widgets.Button(label="Back to this engine", align="end", visible=False)
        self.status = pn.pane.Markdown("", css_classes=["workbench-attach-status"], sizing_mode="stretch_width")
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.attach_button.on_click(self._clicked)
        self.detach_button.on_click(lambda _e: self.detach())
        self.health_text = ""

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(pn.Row(self.url, self.metrics, self.headers, self.attach_button, self.detach_button),
                         self.error, self.status, sizing_mode="stretch_width")

    def _clicked(self, _event: object) -> None:
        self.attach()

    def attach(self) -> RemoteServer | None:
        """Attach to the URL(s) typed (the tabs move to it); a malformed entry is said in
        place and nothing changes."""
        try:
            remote = RemoteServer(parse_urls(_typed(self.url)), headers=parse_headers(_typed(self.headers)),
                                  metrics_urls=_typed(self.metrics).replace(",", " ").split())
        except ValueError as exc:
            self.error.object, self.error.visible = str(exc), True
            return None
        self.headers.value = self.headers.value_input = ""  # kept by the client only
        self.error.visible = False
        self.shown(remote)
        self._attach(remote)
        return remote

    def shown(self, remote: RemoteServer | None) -> None:
        """Show what the tabs act on now."""
        self.health_text = ""
        if remote is None:
            self.status.object = "Tabs act on the engine in this process."
            self.detach_button.visible = False
            return
        self.url.value = ", ".join(remote.urls)
        self.status.object = f"**Attached to {remote.label}**: checking its health…"
        self.detach_button.visible = self._detach is not None

    def detach(self) -> None:
        """Back to the engine in this process."""
        if self._detach is not None:
            self.shown(None)
            self._detach()

    async def read_health(self, remote: RemoteServer) -> None:
        """Read each replica's health into :attr:`health_text` (the next beat shows it)."""
        health = await remote.health()
        words = []
        for url, state in health.items():
            if state["error"]:
                words.append(f"{url}: not reachable ({state['error']})")
            else:
                words.append(f"{url}: {'live' if state['live'] else 'not live'}, "
                             f"{'ready' if state['ready'] else 'not ready'}")
        self.health_text = f"**Attached to {remote.label}**: " + "; ".join(words)

    def show_health(self) -> None:
        """Put the last health read on the page (run on a beat: the document is held)."""
        if self.health_text and self.status.object != self.health_text:
            self.status.object = self.health_text


def _typed(field: pn.widgets.TextInput | pn.widgets.PasswordInput) -> str:
    """What the field shows: the text typed so far (``value_input``, sent on each keystroke),
    else its value (sent on Enter or when it loses focus: an Attach clicked right after
    typing may arrive first, notably in a notebook)."""
    return field.value_input or field.value or ""


#: why the Headless tab cannot work on an attached server
HEADLESS_REMOTE = "it starts and watches a `workbench serve` of this process's engine"
#: why the Rollout tab cannot work on an attached server
ROLLOUT_REMOTE = ("rollouts are set on the engine in this process (a headless `workbench serve` takes "
                  "them at `/v2/models/<model>/rollout`, docs/rollouts.md; Triton has none)")


def remote_note(tab: str, remote: RemoteServer, engine_here: bool, why: str = HEADLESS_REMOTE) -> pn.pane.Alert:
    """What a tab that cannot work on an attached server says in its place (``why``: the
    reason, a clause)."""
    back = ("'Back to this engine' above returns to the engine in this process." if engine_here
            else "This dashboard was opened attached: there is no engine in this process.")
    return pn.pane.Alert(f"**{tab}** is not available while attached to {remote.label}: {why}. {back}",
                         alert_type="info", css_classes=["workbench-remote-note"])


def config_note(remote: RemoteServer) -> pn.pane.Markdown:
    """The Config tab's line on an attached server."""
    return pn.pane.Markdown(
        f"*Attached to {remote.label}: the editor shows the **served** config; Apply loads it as a "
        "config override (Triton's load API) on every replica. The server's config.pbtxt is not "
        "written: Reload in Models reads it again.*", css_classes=["workbench-config-remote"])


__all__ = ["HEADLESS_REMOTE", "HEALTH_EVERY", "ROLLOUT_REMOTE", "AttachBar", "config_note", "parse_headers",
           "remote_note"]
