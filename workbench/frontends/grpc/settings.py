"""The ``LogSettings`` and ``TraceSetting`` RPCs of ``inference.GRPCInferenceService``.

Follows Triton's ``grpc_server.cc``: a request with settings updates them, and every
answer carries all current settings. ``LogSettingsRequest`` values are typed oneofs
(``log_info``/``log_warning``/``log_error`` bool_param, ``log_verbose_level``
uint32_param, ``log_format`` string_param; a wrong or unset oneof is INVALID_ARGUMENT
"expect boolean for 'log_info'" etc.); ``TraceSettingRequest`` values are string lists:
an empty list clears the key (back to the global or start-up value), ``trace_level``
takes several values, the other keys exactly one.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument, Server
from workbench.common.results import LogSettings, TraceSettings
from workbench.frontends.grpc.rpc import Context, rpc

#: LogSettings keys -> (the oneof Triton requires, the word of its error text)
_LOG_TYPES = {
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}
#: the Python type of each oneof (LogSettingsResponse)
_LOG_PARAM = {bool: "bool_param", int: "uint32_param", str: "string_param"}


def log_changes(settings: Any) -> dict[str, Any]:
    """``LogSettingsRequest.settings`` -> ``{key: python value}`` for ``update_log_settings``.

    ``log_file`` is passed on (the engine refuses it: UNIMPLEMENTED "log file location can
    not be updated through network protocol"); unknown keys are dropped, as Triton does.

    Raises:
        InvalidArgument: a value in the wrong oneof ("expect boolean for 'log_info'",
            "expect int32 for 'log_verbose_level'", "expect string for 'log_format'") or a
            ``log_format`` other than default/ISO8601 ("invalid argument for log_format, got: x").
    """
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "log_file":
            changes[key] = value.string_param
            continue
        if key not in _LOG_TYPES:
            continue
        choice, word = _LOG_TYPES[key]
        if value.WhichOneof("parameter_choice") != choice:
            raise InvalidArgument(f"expect {word} for '{key}'")
        changes[key] = getattr(value, choice)
    fmt = changes.get("log_format")
    if fmt is not None and fmt not in ("default", "ISO8601"):
        raise InvalidArgument(f"invalid argument for log_format, got: {fmt}")
    return changes


def log_response(values: LogSettings) -> pb.LogSettingsResponse:
    """``Server.settings.log_settings()`` as a ``LogSettingsResponse`` (bools, uint32 level, strings)."""
    response = pb.LogSettingsResponse()
    for key, value in values.items():
        setattr(response.settings[key], _LOG_PARAM[type(value)], value)
    return response


def trace_changes(settings: Any) -> dict[str, Any]:
    """``TraceSettingRequest.settings`` -> ``update_trace_settings`` values: an empty list
    is ``None`` (clear), ``trace_level`` a list of strings, other keys one string.

    Raises:
        InvalidArgument: several values for a single-valued key ("expect only 1 value for 'k'").
    """
    changes: dict[str, Any] = {}
    for key, setting in settings.items():
        values = list(setting.value)
        if not values:
            changes[key] = None
        elif key == "trace_level":
            changes[key] = values
        elif len(values) == 1:
            changes[key] = values[0]
        else:
            raise InvalidArgument(f"expect only 1 value for '{key}'")
    return changes


def trace_response(values: TraceSettings) -> pb.TraceSettingResponse:
    """``Server.settings.trace_settings()`` as a ``TraceSettingResponse`` (every value a string list)."""
    response = pb.TraceSettingResponse()
    for key, value in values.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
    return response


class SettingsServicer:
    """Mixin for the servicer: ``LogSettings`` and ``TraceSetting`` over ``self.server``."""

    server: Server

    @rpc
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
        """Update the given log settings (none: just read) and answer all of them."""
        if request.settings:
            values = await self.server.settings.update_log_settings(log_changes(request.settings))
        else:
            values = await self.server.settings.log_settings()
        return log_response(values)

    @rpc
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Context) -> pb.TraceSettingResponse:
        """Update the global (or ``model_name``'s) trace settings when given, answer the
        effective ones. An unknown model is INVALID_ARGUMENT ("Request for unknown model : m");
        ``trace_file`` is UNIMPLEMENTED (not changeable at runtime)."""
        model = request.model_name or None
        if request.settings:
            values = await self.server.settings.update_trace_settings(trace_changes(request.settings), model)
        else:
            values = await self.server.settings.trace_settings(model)
        return trace_response(values)
