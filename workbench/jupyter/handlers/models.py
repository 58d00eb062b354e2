"""Models: the repository index with each version's state, and load / unload / reload.

``GET  api/models``                       ``{"models": [{"name", "version", "state", "reason"}]}``
                                          (Triton's repository index, every model and version)
``POST api/models/<m>/load``              load or reload ``m``; optional body ``{"config": ...}``
                                          (a JSON model config overriding config.pbtxt, as
                                          Triton's load API)
``POST api/models/<m>/unload``            unload ``m``; ``?unload_dependents=true`` also
                                          unloads an ensemble's composing models
``POST api/models/<m>/reload``            apply what is on disk now: reload ``m`` (explicit
                                          mode) or rescan the repositories (poll mode)

Load, unload and reload answer ``{"name": m, "models": [m's index rows]}`` once done.
Errors follow the engine: 503 outside explicit mode (Triton's "explicit model load / unload
is not allowed if polling is enabled"), 400 for an unknown model or a failed load.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from workbench import InvalidArgument
from workbench.jupyter.handlers.base import WorkbenchHandler


class ModelsHandler(WorkbenchHandler):
    """``GET api/models``: every model in the repositories and every version with state."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply({"models": await self.engine().repository_index()})


class ModelActionHandler(WorkbenchHandler):
    """``POST api/models/<name>/<load|unload|reload>``."""

    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        server = self.engine()
        if action == "load":
            config = self.json_body().get("config")
            if config is not None and not isinstance(config, (dict, str)):
                raise InvalidArgument("'config' must be a JSON model config (object or string)")
            await server.load_model(name, config or None)
        elif action == "unload":
            await server.unload_model(name, unload_dependents=self.bool_argument("unload_dependents"))
        elif server.options.model_control_mode == "poll":
            await server.poll_repository()
        else:
            await server.load_model(name)
        rows = [row for row in await server.repository_index() if row["name"] == name]
        self.reply({"name": name, "models": rows})


__all__ = ["ModelActionHandler", "ModelsHandler"]
