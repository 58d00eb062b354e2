"""A model's config file: read, validate, write (with backup and hot reload), revert.

``GET  api/models/<m>/config``            ``{"file": {"name", "path", "exists", "text",
                                          "backup_exists", "writable", "reason", "version"},
                                          "config": <the served, normalized config as
                                          Triton's /config JSON, or null>, "config_reason":
                                          "<why null>"}``
``POST api/models/<m>/config/validate``   body ``{"text"}`` -> ``{"problems": [{"message",
                                          "kind", "line", "column"}]}`` (``[]`` = valid)
``PUT  api/models/<m>/config``            body ``{"text", "reload": true, "version": "<the
                                          file's version the text is based on>"}``: validated
                                          atomic write keeping ``config.pbtxt.bak``, then hot
                                          reload as the control mode allows -> ``{"name",
                                          "path", "backup", "restored_from", "version",
                                          "reloaded", "reason", "kept", "dependents"}``
                                          (``kept`` false: the reload failed, the file that
                                          served was put back); an invalid text writes
                                          nothing: 400 with ``problems``
``POST api/models/<m>/config/revert``     body ``{"version"}`` (optional): put the backup back
                                          (once: it is gone after) and reload (same answer as
                                          PUT, with ``restored_from``)

All of them run the engine's ``model_config_file`` / ``validate_model_config_text`` /
``write_model_config`` / ``revert_model_config``; an unknown model is 404. A ``version``
that is not the file's now (it changed since, or it is another model's) is refused with 409
Conflict and the engine's message; nothing is written.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from workbench import (
    ConfigConflict,
    InvalidArgument,
    InvalidModelConfig,
    ModelNotFound,
    ModelNotReady,
    model_config_to_json,
)
from workbench.jupyter.handlers.base import WorkbenchHandler

#: the status of a write based on another version of the file (HTTP's stale-write answer)
CONFLICT = 409


class ModelConfigHandler(WorkbenchHandler):
    """``GET`` / ``PUT api/models/<name>/config``."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        server = self.engine()
        file = await server.config_files.model_config_file(name)
        try:
            config, reason = model_config_to_json(await server.model_config(name)), ""
        except (ModelNotFound, ModelNotReady) as exc:  # in the repository, not serving
            config, reason = None, exc.message
        self.reply({"file": file, "config": config, "config_reason": reason})

    @web.authenticated
    @authorized
    async def put(self, name: str) -> None:
        server = self.engine()
        body = self.json_body()
        text = _config_text(body)
        reload = body.get("reload", True)
        if not isinstance(reload, bool):
            raise InvalidArgument("'reload' must be true or false")
        try:
            result = await server.config_files.write_model_config(
                name, text, reload=reload, expected_version=_version(body))
        except ConfigConflict as exc:
            self.reply_error(exc, status=CONFLICT)
            return
        except InvalidModelConfig as exc:
            problems = await server.config_files.validate_model_config_text(name, text)
            self.reply_error(exc, problems=[p.as_dict() for p in problems])
            return
        self.reply(result)


class ValidateConfigHandler(WorkbenchHandler):
    """``POST api/models/<name>/config/validate``: the problems of a config text."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        text = _config_text(self.json_body())
        problems = await self.engine().config_files.validate_model_config_text(name, text)
        self.reply({"problems": [p.as_dict() for p in problems]})


class RevertConfigHandler(WorkbenchHandler):
    """``POST api/models/<name>/config/revert``: restore ``config.pbtxt.bak`` and reload."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        version = _version(self.json_body())
        try:
            self.reply(await self.engine().config_files.revert_model_config(
                name, expected_version=version))
        except ConfigConflict as exc:
            self.reply_error(exc, status=CONFLICT)


def _version(body: dict) -> str | None:
    version = body.get("version")
    if version is not None and not isinstance(version, str):
        raise InvalidArgument("'version' must be the file's version string from GET")
    return version


def _config_text(body: dict) -> str:
    text = body.get("text")
    if not isinstance(text, str):
        raise InvalidArgument("the request body must be {\"text\": \"<config.pbtxt text>\"}")
    return text


__all__ = ["ModelConfigHandler", "RevertConfigHandler", "ValidateConfigHandler"]
