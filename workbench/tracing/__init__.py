"""Request tracing as Triton writes it (``--trace-config``, the trace extension).

:mod:`~workbench.tracing.records` collects one sampled request's timestamps and tensors
(Triton's ``TraceManager::Trace``); :mod:`~workbench.tracing.manager` samples requests per
model setting and hands finished traces to the JSON trace file
(:mod:`~workbench.tracing.files`) or the OpenTelemetry exporter
(:mod:`~workbench.tracing.otel`, optional: the ``trace`` extra).
"""

from workbench.tracing.manager import TraceManager
from workbench.tracing.records import RequestTrace, Trace

__all__ = ["RequestTrace", "Trace", "TraceManager"]
