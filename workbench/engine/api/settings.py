"""Runtime log and trace settings: Triton's logging and trace extensions, frontend-neutral.

``LogSettings`` holds ``/v2/logging`` (gRPC ``LogSettings``) state and tells observers
(the host's logging set-up) about every change; ``TraceSettings`` holds
``/v2[/models/<m>]/trace/setting`` (gRPC ``TraceSetting``) state: global settings over the
start-up defaults, per-model settings over the global ones, a ``None`` value clears a key
back to the level below (Triton's ``TraceManager``). Values, checks and error texts follow
Triton's ``http_server.cc`` (``HandleLogging``, ``HandleTrace``) and ``tracer.cc``.
The settings in effect drive :class:`~workbench.tracing.TraceManager` (the traces written).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from workbench.common import results
from workbench.common.errors import InvalidArgument, Unsupported
from workbench.startup.options import ServerOptions

#: ``observer(settings)``: told the log settings at registration and after every update
LogObserver = Callable[[results.LogSettings], None]
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_STRING = "attempt to access JSON non-string as string"
_LEADING_INT = re.compile(r"\s*[+-]?\d+")
_UINT32_MAX, _INT32_MAX = 2**32 - 1, 2**31 - 1


class LogSettings:
    """``log_file``, ``log_info``, ``log_warning``, ``log_error``, ``log_verbose_level``,
    ``log_format`` (``"default"`` | ``"ISO8601"``), initially from the server options."""

    def __init__(self, options: ServerOptions) -> None:
        self._values: dict[str, Any] = {
            "log_file": options.log_file,
            "log_info": options.log_info,
            "log_warning": options.log_warning,
            "log_error": options.log_error,
            "log_verbose_level": options.log_verbose,
            "log_format": options.log_format,
        }
        self._observers: list[LogObserver] = []

    def snapshot(self) -> results.LogSettings:
        """The current settings (a copy), as ``GET /v2/logging`` returns them."""
        # the keys are fixed in __init__; update() only replaces values it has type-checked
        return cast(results.LogSettings, dict(self._values))

    def add_observer(self, observer: LogObserver) -> None:
        """Call ``observer(settings)`` now and after every update."""
        self._observers.append(observer)
        observer(self.snapshot())

    def update(self, changes: Mapping[str, object]) -> results.LogSettings:
        """Apply the given keys (``None`` values and unknown keys are ignored); all or nothing.

        Raises:
            Unsupported: a ``log_file`` value ("log file location can not be updated
                through network protocol").
            InvalidArgument: a value of the wrong JSON type (TritonJson's texts), or a
                ``log_format`` other than default/ISO8601 (Triton's text "invalid argument for
                --log_format, got: <v>"; Triton answers it 503 UNAVAILABLE, a client's mistake
                is 400 here, as its gRPC frontend's INVALID_ARGUMENT).
        """
        new = {k: v for k, v in changes.items() if k in self._values and v is not None}
        if "log_file" in new:
            raise Unsupported("log file location can not be updated through network protocol")
        for key in ("log_info", "log_warning", "log_error"):
            if key in new and not isinstance(new[key], bool):
                raise InvalidArgument(_NOT_BOOL)
        level = new.get("log_verbose_level", 0)
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise InvalidArgument(_NOT_UINT)
        fmt = new.get("log_format", "default")
        if not isinstance(fmt, str):
            raise InvalidArgument(_NOT_STRING)
        if fmt not in ("default", "ISO8601"):
            raise InvalidArgument(f"invalid argument for --log_format, got: {fmt}")
        self._values.update(new)
        for observer in self._observers:
            observer(self.snapshot())
        return self.snapshot()


class TraceSettings:
    """Trace settings: start-up defaults, global overrides, per-model overrides.

    Internal values: ``trace_level`` list of ``"TIMESTAMPS"``/``"TENSORS"`` (empty = OFF),
    ``trace_rate``, ``trace_count``, ``log_frequency`` ints, ``trace_file``, ``trace_mode``.
    """

    def __init__(self, options: ServerOptions) -> None:
        self._default: dict[str, Any] = {
            # any OFF level disables tracing (tritonserver's explicit_disable_trace)
            "trace_level": [] if "OFF" in options.trace_level else
            [lvl for lvl in ("TIMESTAMPS", "TENSORS") if lvl in options.trace_level],
            "trace_rate": options.trace_rate,
            "trace_count": options.trace_count,
            "log_frequency": options.trace_log_frequency,
            "trace_file": options.trace_file,
            "trace_mode": options.trace_mode,
        }
        self._global: dict[str, Any] = {}
        self._models: dict[str, dict[str, Any]] = {}

    def values(self, model: str | None = None) -> dict[str, Any]:
        """Effective internal values of ``model`` (or the global ones): ``trace_level`` a list
        (empty = OFF), ``trace_rate`` / ``trace_count`` / ``log_frequency`` ints,
        ``trace_file``, ``trace_mode``."""
        return {**self._default, **self._global, **self._models.get(model or "", {})}

    def overridden(self) -> set[str]:
        """The models with trace settings of their own."""
        return set(self._models)

    def get(self, model: str | None = None) -> results.TraceSettings:
        """Effective settings of ``model`` (or the global ones) in Triton's response shape:
        ``trace_level`` a list (``["OFF"]`` when off), every other value a string;
        ``log_frequency`` and ``trace_file`` only in ``triton`` mode."""
        values = self.values(model)
        level = values["trace_level"] or ["OFF"]
        rate, count = str(values["trace_rate"]), str(values["trace_count"])
        if values["trace_mode"] == "triton":  # Triton's key order: the mode last
            return {"trace_level": level, "trace_rate": rate, "trace_count": count,
                    "log_frequency": str(values["log_frequency"]), "trace_file": values["trace_file"],
                    "trace_mode": values["trace_mode"]}
        return {"trace_level": level, "trace_rate": rate, "trace_count": count, "trace_mode": values["trace_mode"]}

    def update(self, changes: Mapping[str, object], model: str | None = None) -> results.TraceSettings:
        """Set (or with ``None`` clear) keys globally or for ``model``; return :meth:`get`.

        Raises:
            Unsupported: ``trace_file`` given ("trace file location can not be updated
                through network protocol").
            InvalidArgument: unparsable values, or a resulting setting that traces but is
                invalid ("Attempting to set invalid trace setting :<reason>").
        """
        if "trace_file" in changes:
            raise Unsupported("trace file location can not be updated through network protocol")
        layer = dict(self._models.get(model, {}) if model else self._global)
        for key, value in _parse_trace_changes(changes).items():
            if value is None:
                layer.pop(key, None)
            else:
                layer[key] = value
        below = {**self._default, **self._global} if model else self._default
        _check_trace_setting({**below, **layer})
        if not model:
            self._global = layer
        elif layer:
            self._models[model] = layer
        else:
            self._models.pop(model, None)
        return self.get(model)


def _parse_trace_changes(changes: Mapping[str, object]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    if "trace_level" in changes:
        level = _parse_level(changes["trace_level"])
        if level is not _UNCHANGED:
            parsed["trace_level"] = level
    for key, low, high in (("trace_rate", 0, _UINT32_MAX), ("trace_count", -1, _INT32_MAX),
                           ("log_frequency", 0, _UINT32_MAX)):
        if key in changes:
            value = changes[key]
            parsed[key] = None if value is None else _parse_int(key, value, low, high)
    return parsed


_UNCHANGED = object()


def _parse_level(value: object) -> object:
    """``["OFF"]`` -> [], ``["TIMESTAMPS", "TENSORS"]`` -> both; unknown names are skipped and
    a list without a known one changes nothing (Triton's behaviour)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidArgument("attempt to access JSON non-array as array")
    if not all(isinstance(v, str) for v in value):
        raise InvalidArgument(_NOT_STRING)
    if "OFF" in value:
        if len(value) != 1:
            raise InvalidArgument("Expect only one trace level 'OFF' is specified")
        return []
    levels = [lvl for lvl in ("TIMESTAMPS", "TENSORS") if lvl in value]
    return levels if levels else _UNCHANGED


def _parse_int(key: str, value: object, low: int, high: int) -> int:
    """Triton reads these as JSON strings through ``std::stoi`` (leading integer)."""
    if not isinstance(value, str):
        raise InvalidArgument(_NOT_STRING)
    match = _LEADING_INT.match(value)
    if match is None:
        raise InvalidArgument(f"Unable to parse '{key}', got: {value}")
    number = int(match.group())
    if key == "trace_count" and number < low:
        raise InvalidArgument(
            f"Unable to parse 'trace_count'. Expecting value >= {low}, got:{value}"
        )
    if not low <= number <= high:
        raise InvalidArgument(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {value}"
        )
    return number


def _check_trace_setting(values: dict[str, Any]) -> None:
    """Triton's ``TraceSetting::Valid``; only a setting that disables tracing may be invalid."""
    if not values["trace_level"]:
        return
    reason = ""
    if values["trace_rate"] == 0:
        reason = "sample rate must be non-zero"
    elif values["trace_mode"] == "triton" and not values["trace_file"]:
        reason = "trace file name is not given"
    if reason or values["trace_count"] == 0:
        raise InvalidArgument(f"Attempting to set invalid trace setting :{reason}")
