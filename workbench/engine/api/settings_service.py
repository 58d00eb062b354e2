"""The logging and trace-settings service behind :class:`~workbench.engine.api.server.Server`
(Triton's logging and trace extensions), for every frontend alike.

HTTP maps them to ``/v2/logging`` and ``/v2[/models/{m}]/trace/setting``; gRPC to
``LogSettings`` and ``TraceSetting``. Errors are engine errors with Triton's texts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from workbench.common import results
from workbench.common.errors import InvalidArgument
from workbench.engine.api.settings import LogObserver, LogSettings, TraceSettings
from workbench.startup.options import ServerOptions
from workbench.tracing import TraceManager


class SettingsService:
    """Log and trace settings behind async methods.

    Args:
        options: the start-up settings (``--log-*``, ``--trace-config``).
        model_ready: whether a model is known and has a READY version (a model's trace
            settings need one).

    Attributes:
        tracer: the trace manager the trace settings drive (which requests are traced).
    """

    def __init__(self, options: ServerOptions, model_ready: Callable[[str], bool]) -> None:
        self._log_settings = LogSettings(options)
        self._trace_settings = TraceSettings(options)
        self._model_ready = model_ready
        self.tracer = TraceManager(options, self._trace_settings.values())

    async def log_settings(self) -> results.LogSettings:
        """Triton's logging extension (``GET /v2/logging``, gRPC ``LogSettings``):
        ``{"log_file": str, "log_info": bool, "log_warning": bool, "log_error": bool,
        "log_verbose_level": int, "log_format": "default" | "ISO8601"}``."""
        return self._log_settings.snapshot()

    async def update_log_settings(self, settings: Mapping[str, object]) -> results.LogSettings:
        """Change log settings (keys as :meth:`log_settings`; ``None`` values are ignored) and
        tell the log-settings observers; returns the new settings.

        Raises:
            Unsupported: ``log_file`` set (not changeable at runtime, HTTP 501).
            InvalidArgument: a value of the wrong type (TritonJson's texts), or an unknown
                ``log_format`` (Triton's text; Triton answers that one 503, here 400: a
                client's mistake).
        """
        return self._log_settings.update(settings)

    def add_log_settings_observer(self, observer: LogObserver) -> None:
        """Call ``observer(settings)`` now and after every log-settings update: the host
        applies them to Python logging (levels, format, file)."""
        self._log_settings.add_observer(observer)

    async def trace_settings(self, model: str | None = None) -> results.TraceSettings:
        """Triton's trace extension (``GET /v2[/models/<m>]/trace/setting``, gRPC
        ``TraceSetting``): ``{"trace_level": ["OFF"] | ["TIMESTAMPS", "TENSORS"...],
        "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode"}``, values
        as strings; a model's own settings over the global ones.

        Raises:
            InvalidArgument: ``model`` is not a READY model ("Request for unknown model : m").
        """
        await self._require_trace_model(model)
        return self._with_count(self._trace_settings.get(model), model)

    async def update_trace_settings(self, settings: Mapping[str, object],
                                    model: str | None = None) -> results.TraceSettings:
        """Set trace settings globally or for ``model``; a ``None`` value clears the key back
        to the global (for a model) or start-up (global) value. Returns :meth:`trace_settings`.
        Values are strings (``trace_rate``, ``trace_count``, ``log_frequency``) or a list
        (``trace_level``), as on Triton's wire. The new setting takes effect at once for the
        requests sampled from then on (Triton replaces the setting: counters start again).

        Raises:
            InvalidArgument: unknown model, unparsable value or invalid setting (Triton's texts).
            Unsupported: ``trace_file`` given (not changeable at runtime).
        """
        await self._require_trace_model(model)
        response = self._trace_settings.update(settings, model)
        self.tracer.apply(self._trace_settings.values, self._trace_settings.overridden(), model)
        return self._with_count(response, model)

    def _with_count(self, response: results.TraceSettings, model: str | None) -> results.TraceSettings:
        """``trace_count`` as Triton reports it: what the setting in effect will still trace."""
        response["trace_count"] = str(self.tracer.remaining(model))
        return response

    async def _require_trace_model(self, model: str | None) -> None:
        if model and not self._model_ready(model):
            raise InvalidArgument(f"Request for unknown model : {model}")


__all__ = ["SettingsService"]
