"""``RemoteConfigFiles``: the Config tab's file service (``server.config_files``) for a server
attached by URL, through Triton's load API with a ``config`` override.

An attached server's ``config.pbtxt`` files are out of reach (the v2 API neither reads nor
writes them), so:

* the text shown is the **served** config (``GET /v2/models/<m>/config``, as protobuf text);
* Apply loads the model with the edited text as the load API's override (Triton's
  ``{"parameters": {"config": "<json>"}}``): it serves at once on every replica, without a
  dropped request, and the file on the server stays as it was (a later load without override,
  e.g. Reload, reads it again);
* read-only, saying why, where that cannot work: the model is not loaded (no served config
  to start from), or the server refused an override (not in explicit model control mode,
  or the ``model-repository`` API restricted and no key given). The refusal is remembered
  for the session: the tab then opens read-only with the server's words;
* no backup, so no Revert (Reload in the Models tab goes back to the file).

Validation is the syntax only (line and column); the server checks the rest when it loads.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import (
    ConfigConflict,
    ConfigProblem,
    InvalidArgument,
    ModelNotFound,
    ModelNotReady,
    Unavailable,
    Unsupported,
    WorkbenchError,
)
from workbench.common.results import ConfigFile, ConfigWriteResult


class Served(Protocol):
    """What this service uses of :class:`~workbench.remote.client.RemoteServer`."""

    @property
    def url(self) -> str: ...

    @property
    def label(self) -> str: ...

    async def model_config(self, name: str, version: str = "") -> ModelConfig: ...

    async def load_model(self, name: str, config: str | dict[str, Any] | None = None,
                         files: dict[str, bytes] | None = None) -> None: ...

#: words of a load refused for the server's mode or rights (then the tab turns read-only)
REFUSALS = ("not allowed", "forbidden", "explicit model", "restricted", "polling is enabled")
#: Triton's words for a load refused in model control mode none *or* poll (it says "polling"
#: for both), and what they mean for the person who clicked Apply
MODE_REFUSAL = "polling is enabled"
MODE_HINT = (" (Triton's words for a server whose model control mode is not explicit, none or poll:"
             " start it with --model-control-mode=explicit to apply configs from here)")


def _version(name: str, text: str) -> str:
    return f"{name}:{hashlib.sha256(text.encode()).hexdigest()}"


class RemoteConfigFiles:
    """The served configs of an attached server, applied by load overrides (see the module
    docstring). Its methods have the engine's ``ConfigFileService`` signatures and results."""

    def __init__(self, server: Served) -> None:
        self.server = server
        #: why the server refused an override, once it did ("" until then)
        self.refused = ""

    def _path(self, name: str) -> str:
        return f"{self.server.url}/v2/models/{name}/config"

    async def model_config_file(self, name: str) -> ConfigFile:
        """The served config of ``name`` as text, writable unless the model is not loaded
        or the server refused an override.

        Raises:
            WorkbenchError: the server could not be asked (``Unavailable``).
        """
        try:
            config = await self.server.model_config(name)
        except (ModelNotFound, ModelNotReady) as exc:
            reason = (f"'{name}' is not loaded on {self.server.label}: an attached server's config.pbtxt "
                      f"cannot be read over the v2 API, only a READY version's served config ({exc.message})")
            return {"name": name, "path": self._path(name), "exists": False, "text": "", "backup_exists": False,
                    "writable": False, "reason": reason, "version": f"{name}:none"}
        text = text_format.MessageToString(config)
        reason = ""
        if self.refused:
            reason = (f"the server refused a load with a config override ({self.refused}); "
                      "its config.pbtxt is not reachable from here")
        return {"name": name, "path": self._path(name), "exists": True, "text": text, "backup_exists": False,
                "writable": not self.refused, "reason": reason, "version": _version(name, text)}

    async def validate_model_config_text(self, name: str, text: str) -> list[ConfigProblem]:
        """The syntax problems of ``text`` (line, column) and a ``name`` that is not the
        model's; the server validates the rest when Apply loads it."""
        try:
            config = text_format.Parse(text, ModelConfig())
        except text_format.ParseError as exc:
            return [ConfigProblem(str(exc), "syntax", exc.GetLine() or None, exc.GetColumn() or None)]
        if config.name and config.name != name:
            return [ConfigProblem(f"the config's name '{config.name}' is not the model's '{name}'")]
        return []

    async def write_model_config(self, name: str, text: str, *, reload: bool = True,
                                 expected_version: str | None = None) -> ConfigWriteResult:
        """Load ``name`` with ``text`` as the load API's ``config`` override (on every
        replica); ``reload`` must be True (nothing is written without loading).

        Raises:
            ConfigConflict: the served config changed since ``expected_version`` was read.
            InvalidArgument: the text does not parse; or the server refused the load (its
                words; the serving versions stay, as Triton keeps them).
            Unavailable / Unsupported: the server refused the override (remembered: the tab
                is read-only after).
        """
        if not reload:
            raise Unsupported("an attached server's config can only be applied by loading it")
        current = await self.model_config_file(name)
        if not current["writable"]:
            raise Unavailable(f"read only: {current['reason']}")
        if expected_version is not None and expected_version != current["version"]:
            raise ConfigConflict(f"the served config of '{name}' changed since it was read "
                                 "(another client loaded it): nothing was applied")
        problems = await self.validate_model_config_text(name, text)
        if problems:
            raise InvalidArgument(problems[0].message)
        config = text_format.Parse(text, ModelConfig())
        config.name = name
        try:
            override = json_format.MessageToJson(config, preserving_proto_field_name=True)
            await self.server.load_model(name, config=override)
        except WorkbenchError as exc:
            if MODE_REFUSAL in exc.message.lower():
                exc = type(exc)(f"{exc.message}{MODE_HINT}")
            if isinstance(exc, Unavailable | Unsupported) or any(w in exc.message.lower() for w in REFUSALS):
                self.refused = exc.message
            raise exc from None
        served = await self.model_config_file(name)
        return {"name": name, "path": served["path"], "backup": None, "restored_from": None,
                "version": served["version"], "reloaded": True, "reason": "", "kept": True, "dependents": []}

    async def revert_model_config(self, name: str, *, reload: bool = True,
                                  expected_version: str | None = None) -> ConfigWriteResult:
        """Refused: an attached server keeps no backup here.

        Raises:
            Unsupported: always (Reload in the Models tab loads ``config.pbtxt`` again).
        """
        raise Unsupported("no backup on an attached server: Reload in the Models tab loads its "
                          "config.pbtxt again")


__all__ = ["REFUSALS", "RemoteConfigFiles", "Served"]
