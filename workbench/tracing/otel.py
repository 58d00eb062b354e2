"""``--trace-config mode=opentelemetry``: traces as OpenTelemetry spans over OTLP/HTTP.

Uses the OpenTelemetry SDK (``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``,
the ``trace`` extra), imported only in this mode. Spans follow Triton's ``tracer.cc``:

- ``InferRequest``: the root span of a trace, from the first timestamp to the release of the
  trace (after the response is sent), with the frontend's timestamps (``HTTP_RECV_START``,
  ``GRPC_SEND_END``...) as events;
- one span per request named after its model, from ``REQUEST_START`` to ``REQUEST_END``,
  with events ``REQUEST_START``, ``QUEUE_START``, ``REQUEST_END`` and attributes
  ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
  ``triton.trace_parent_id`` (and ``triton.request_id`` when given); its parent is the root
  span, or the ensemble request's span for an ensemble step;
- a ``compute`` span inside it from ``COMPUTE_START`` to ``COMPUTE_END`` with the four
  compute timestamps as events.

Spans are of kind SERVER, from tracer ``triton-server``, exported by a batch span processor
(``bsp_*`` settings). Timestamps are the engine's monotonic ones shifted to wall-clock time
by one offset taken at start (Triton's ``time_offset_``). ``TENSORS`` records are not
exported (Triton: "Tensor level tracing is not supported by the mode: opentelemetry").

A request that carried a W3C ``traceparent`` (read by the SDK's
``TraceContextTextMapPropagator``, Triton's ``HttpTraceContext`` propagator) gets an
``InferRequest`` span whose parent is the caller's span, in the caller's trace.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from workbench.common.errors import InvalidArgument
from workbench.startup.options import ServerOptions
from workbench.tracing.records import Record

#: Triton's ``kTritonTracer``
TRACER_NAME = "triton-server"
_REQUEST_EVENTS = ("REQUEST_START", "QUEUE_START")
_COMPUTE_EVENTS = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")
_ENGINE_EVENTS = frozenset((*_REQUEST_EVENTS, *_COMPUTE_EVENTS, "REQUEST_END"))
MISSING_SDK = ("--trace-config mode=opentelemetry needs the OpenTelemetry SDK: pip install "
               "'workbench[trace]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)")


class OtelExporter:
    """Spans from finished traces, exported to ``options.trace_opentelemetry_url``.

    Raises:
        InvalidArgument: the OpenTelemetry SDK or OTLP/HTTP exporter is not installed
            (:data:`MISSING_SDK`).
    """

    def __init__(self, options: ServerOptions) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError:
            raise InvalidArgument(MISSING_SDK) from None
        attributes: dict[str, Any] = {"service.name": "triton-inference-server"}
        for item in options.trace_opentelemetry_resource:
            key, _, value = item.partition("=")
            attributes[key] = value
        self._provider = TracerProvider(resource=Resource.create(attributes))
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=options.trace_opentelemetry_url),
            max_queue_size=options.trace_opentelemetry_bsp_max_queue_size,
            schedule_delay_millis=options.trace_opentelemetry_bsp_schedule_delay,
            max_export_batch_size=options.trace_opentelemetry_bsp_max_export_batch_size,
        )
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer(TRACER_NAME)
        self._api = trace
        self._propagator = TraceContextTextMapPropagator()
        self._offset = time.time_ns() - time.monotonic_ns()

    def extract(self, carrier: Mapping[str, str]) -> Any:
        """The context of a valid ``traceparent`` (and ``tracestate``) in ``carrier``, else None."""
        context = self._propagator.extract(carrier)
        if self._api.get_current_span(context).get_span_context().is_valid:
            return context
        return None

    def export(self, records: list[Record], context: Any = None) -> None:
        """One trace's records -> its spans (module doc), ended and queued for export;
        ``InferRequest`` is a child of ``context``'s span when given (a propagated context)."""
        stamps: dict[int, dict[str, int]] = {}
        headers: dict[int, Record] = {}
        for record in records:
            if "timestamps" in record:
                for stamp in record["timestamps"]:
                    stamps.setdefault(record["id"], {})[stamp["name"]] = stamp["ns"]
            elif "model_name" in record:
                headers[record["id"]] = record
        if not stamps:
            return
        wall, kind, tracer = self._offset, self._api.SpanKind.SERVER, self._tracer
        root_id = min(stamps)
        first = min(ns for own in stamps.values() for ns in own.values())
        root = tracer.start_span("InferRequest", context=context, kind=kind, start_time=first + wall)
        for name, ns in sorted(stamps[root_id].items(), key=lambda item: item[1]):
            if name not in _ENGINE_EVENTS:
                root.add_event(name, timestamp=ns + wall)
        spans: dict[int, Any] = {}
        for trace_id in sorted(headers):  # an ensemble's id is lower than its steps'
            header, own = headers[trace_id], stamps.get(trace_id, {})
            parent = spans.get(header.get("parent_id", 0), root)
            start = own.get("REQUEST_START", first)
            attributes: dict[str, Any] = {
                "triton.model_name": header["model_name"],
                "triton.model_version": header["model_version"],
                "triton.trace_id": trace_id,
                "triton.trace_parent_id": header.get("parent_id", 0),
            }
            if header.get("request_id"):
                attributes["triton.request_id"] = header["request_id"]
            span = tracer.start_span(header["model_name"], context=self._api.set_span_in_context(parent),
                                     kind=kind, start_time=start + wall, attributes=attributes)
            spans[trace_id] = span
            for name in _REQUEST_EVENTS:
                if name in own:
                    span.add_event(name, timestamp=own[name] + wall)
            if "COMPUTE_START" in own:
                compute = tracer.start_span("compute", context=self._api.set_span_in_context(span),
                                            kind=kind, start_time=own["COMPUTE_START"] + wall)
                for name in _COMPUTE_EVENTS:
                    if name in own:
                        compute.add_event(name, timestamp=own[name] + wall)
                compute.end(end_time=own.get("COMPUTE_END", own["COMPUTE_START"]) + wall)
        now = time.monotonic_ns()
        for trace_id in sorted(spans, reverse=True):  # steps end before their ensemble
            own = stamps.get(trace_id, {})
            if "REQUEST_END" in own:
                spans[trace_id].add_event("REQUEST_END", timestamp=own["REQUEST_END"] + wall)
            spans[trace_id].end(end_time=own.get("REQUEST_END", now) + wall)
        root.end(end_time=now + wall)

    def close(self) -> None:
        """Export the queued spans and shut the processor down."""
        self._provider.shutdown()


__all__ = ["MISSING_SDK", "TRACER_NAME", "OtelExporter"]
