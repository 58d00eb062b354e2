"""Which requests are traced, and where finished traces go (Triton's ``TraceManager``).

The manager holds one :class:`TraceSetting` for the global trace setting and one per model
that has settings of its own (``/v2/models/<m>/trace/setting``, gRPC ``TraceSetting``);
a frontend asks :meth:`TraceManager.sample` for a trace per request. As in Triton, a
setting samples every ``rate``-th request that reaches it until ``count`` traces were made
(-1: no limit), each update replaces the setting object (its counters start again), and a
trace keeps the setting it was sampled under until it is written.

Output in ``triton`` mode (``TraceSetting.write``, Triton's ``WriteTrace``): with
``log_frequency`` N > 0 every N traces are written to ``PATH.<index>`` (the rest when the
setting is replaced or the server stops); with a ``count`` that runs out, the collected
traces are written to ``PATH.<index>`` once the last one is done; otherwise each trace is
added to ``PATH`` as it completes, which stays a complete JSON list (Triton keeps them in
memory until the setting is replaced or the server stops). In
``opentelemetry`` mode each trace becomes spans for the OTLP/HTTP exporter
(:mod:`workbench.tracing.otel`).

OpenTelemetry context propagation (Triton's ``GetTraceStartOptions``): in ``opentelemetry``
mode with a level set, a request whose headers (HTTP) or metadata (gRPC) carry a valid W3C
``traceparent`` is traced whatever its setting's ``rate`` and ``count`` (it still counts
towards the rate), and its spans become children of the caller's span; ``rate=0`` then
traces only such requests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from workbench.startup.options import ServerOptions
from workbench.tracing.files import TraceFile
from workbench.tracing.records import Record, RequestTrace, Trace


class TraceExporter(Protocol):
    """Where ``opentelemetry`` mode sends finished traces."""

    def export(self, records: list[Record], context: Any = None) -> None:
        """Turn one trace's records into spans (children of ``context``'s span, a caller's
        propagated context, when given) and queue them for export."""

    def extract(self, carrier: Mapping[str, str]) -> Any:
        """The OpenTelemetry context a request's headers carry (W3C ``traceparent``), or None
        when they carry no valid one."""

    def close(self) -> None:
        """Export what is queued and stop."""


class TraceSetting:
    """One effective trace setting and its sampling state (Triton's ``TraceSetting``).

    Args:
        values: ``trace_level`` (list, empty = OFF), ``trace_rate``, ``trace_count``,
            ``log_frequency``, ``trace_file``, ``trace_mode`` (as
            :class:`~workbench.engine.api.settings.TraceSettings` keeps them).
        file: the trace file (``triton`` mode with a file name), else None.
        export: ``opentelemetry`` mode's ``export(records)`` (the manager's exporter).
    """

    def __init__(self, values: Mapping[str, Any], file: TraceFile | None,
                 export: Callable[..., None]) -> None:
        self.values = dict(values)
        level = values["trace_level"]
        self.timestamps = "TIMESTAMPS" in level
        self.tensors = "TENSORS" in level
        self.rate: int = values["trace_rate"]
        #: traces still to make (-1: no limit); what ``trace_count`` reports
        self.count: int = values["trace_count"]
        self.log_frequency: int = values["log_frequency"]
        self.mode: str = values["trace_mode"]
        self._file = file
        self._export = export
        #: Triton's ``Valid()``: a level, a non-zero rate and somewhere to write
        self.valid = bool(level) and self.rate != 0 and (self.mode == "opentelemetry" or file is not None)
        #: a request with a propagated OpenTelemetry context is traced (Triton's ``force_sample``)
        self.propagates = bool(level) and self.mode == "opentelemetry"
        self._sampled = self._created = self._collected = 0
        self._buffer: list[Record] = []
        self._in_buffer = 0
        self._retired = False

    def sample(self, context: Any = None) -> RequestTrace | None:
        """The next request's trace when it is sampled, else None; a request with a
        propagated OpenTelemetry ``context`` is always traced (Triton's ``force_sample``:
        it still counts towards ``rate``, and takes one of ``count`` when the rate hits)."""
        forced = context is not None and self.propagates
        if not forced and (not self.valid or self.count == 0):
            return None
        hit = False
        if self.rate:
            self._sampled += 1
            hit = self._sampled % self.rate == 0 and self.count != 0
            if hit:
                if self.count > 0:
                    self.count -= 1
                self._created += 1
        if not (hit or forced):
            return None
        sink = functools.partial(self.write, context=context) if forced else self.write
        return Trace(sink, self.timestamps, self.tensors).root

    def write(self, records: list[Record], context: Any = None) -> None:
        """A trace of this setting is done: export it (under ``context``, a caller's
        propagated OpenTelemetry context), or buffer/write it (module doc)."""
        self._collected += 1
        if self.mode == "opentelemetry":
            self._export(records, context)
            return
        if self._file is None:
            return
        if self._retired:
            self._file.save(records, self.log_frequency != 0)
            return
        if self.log_frequency == 0 and self.count < 0:
            self._file.save(records, False)
            return
        self._buffer.extend(records)
        self._in_buffer += 1
        exhausted = self.count == 0 and self._collected == self._created
        if exhausted or (self.log_frequency and self._in_buffer >= self.log_frequency):
            self._flush(True)

    def retire(self) -> None:
        """The setting was replaced or the server stops: write what is buffered (to
        ``PATH.<index>`` with a ``log_frequency``, else to ``PATH``); traces still under
        way are written as they finish."""
        self._retired = True
        self._flush(self.log_frequency != 0)

    def _flush(self, to_index_file: bool) -> None:
        if self._buffer and self._file is not None:
            self._file.save(self._buffer, to_index_file)
        self._buffer, self._in_buffer = [], 0


class TraceManager:
    """The trace settings in effect and the sampling of requests.

    Args:
        options: the start-up options (``--trace-config``; the OpenTelemetry settings).
        startup: the start-up trace setting's values (as :class:`TraceSetting` takes them).
    """

    def __init__(self, options: ServerOptions, startup: Mapping[str, Any]) -> None:
        self._options = options
        self._files: dict[str, TraceFile] = {}
        self._exporter: TraceExporter | None = None
        self._global = self._setting(startup)
        self._models: dict[str, TraceSetting] = {}
        #: some setting may trace: the frontends take timestamps only then (the OFF fast path)
        self.enabled = self._global.valid or self._global.propagates
        #: some setting traces requests with a propagated OpenTelemetry context: the frontends
        #: pass their headers / metadata to :meth:`sample` only then
        self.propagates = self._global.propagates

    def open(self) -> None:
        """Create the OpenTelemetry exporter in ``opentelemetry`` mode (at server start).

        Raises:
            InvalidArgument: the OpenTelemetry SDK is not installed (the ``trace`` extra).
        """
        if self._options.trace_mode == "opentelemetry" and self._exporter is None:
            from workbench.tracing.otel import OtelExporter  # an optional dependency: lazily

            self._exporter = OtelExporter(self._options)

    def _export_records(self, records: list[Record], context: Any = None) -> None:
        if self._exporter is not None:
            self._exporter.export(records, context)

    def sample(self, model: str, carrier: Mapping[str, str] | None = None) -> RequestTrace | None:
        """The trace for a request to ``model`` when its setting samples it, else None.

        ``carrier``: the request's headers (HTTP, lower-case names) or metadata (gRPC); in
        ``opentelemetry`` mode a valid W3C ``traceparent`` in it forces the trace and makes
        its spans children of the caller's span (module doc)."""
        setting = self._models.get(model, self._global)
        context = None
        if carrier is not None and setting.propagates and self._exporter is not None:
            context = self._exporter.extract(carrier)
        return setting.sample(context)

    def remaining(self, model: str | None = None) -> int:
        """Traces the setting of ``model`` (or the global one) will still make (-1: no limit)."""
        return self._models.get(model or "", self._global).count

    def apply(self, values: Callable[[str | None], Mapping[str, Any]], overridden: set[str],
              model: str | None = None) -> None:
        """Take a settings update into effect: ``values(model)`` gives effective values,
        ``overridden`` the models with settings of their own. A global update replaces the
        global setting and each model setting whose values it changed; a model update
        replaces (or, without settings of its own any more, drops) that model's."""
        names = [model] if model else list(self._models)
        if not model:
            self._global.retire()
            self._global = self._setting(values(None))
        for name in names:
            old = self._models.pop(name, None)
            if name not in overridden:
                if old is not None:
                    old.retire()
                continue
            new_values = values(name)
            if old is not None and old.values == dict(new_values):
                self._models[name] = old
                continue
            if old is not None:
                old.retire()
            self._models[name] = self._setting(new_values)
        settings = (self._global, *self._models.values())
        self.enabled = any(s.valid or s.propagates for s in settings)
        self.propagates = any(s.propagates for s in settings)

    def close(self) -> None:
        """Write what is buffered, close the trace files, flush the exporter."""
        for setting in (self._global, *self._models.values()):
            setting.retire()
        for file in self._files.values():
            file.close()
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None

    def _setting(self, values: Mapping[str, Any]) -> TraceSetting:
        name = values["trace_file"]
        file = None
        if name:
            file = self._files.get(name)
            if file is None:
                file = self._files[name] = TraceFile(name)
        return TraceSetting(values, file, self._export_records)


__all__ = ["TraceExporter", "TraceManager", "TraceSetting"]
