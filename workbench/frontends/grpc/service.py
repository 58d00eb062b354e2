"""``inference.GRPCInferenceService``: Triton's gRPC API as a thin adapter over ``Server``.

Every method decodes the protobuf request, makes one engine call and encodes the
answer; an engine error aborts the RPC with Triton's gRPC status code and message
(``workbench.frontends.status``). All methods are ``async`` and run on the engine's
event loop (grpc.aio; no thread pool). When a client cancels an RPC or its deadline
passes, grpc.aio cancels the method's task, which cancels the awaited
``Server.infer``: the scheduler then drops the request from its queue instead of
executing it.

A sampled ``ModelInfer`` request (``--trace-config``) gets Triton's ``GRPC_WAITREAD_START`` /
``GRPC_WAITREAD_END`` (both when the handler receives the decoded message: grpc.aio reads it
before), ``GRPC_SEND_START`` (the response handed to grpc.aio) and ``GRPC_SEND_END`` (the RPC
done) timestamps, and ``INFER_RESPONSE_COMPLETE`` when the engine's response arrives; its trace
is written when the RPC is done. Streamed requests are traced in
:mod:`workbench.frontends.grpc.stream`. In ``opentelemetry`` mode the RPC's metadata goes to the
sampling, for a W3C ``traceparent`` (Triton's ``GrpcServerCarrier``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import InvalidArgument, Server, Unsupported, WorkbenchError
from workbench.frontends.error_boundary import grpc_failure
from workbench.frontends.grpc.codec import decode_request, encode_raw_response
from workbench.frontends.grpc.decoding import resolve
from workbench.frontends.grpc.decompression import Compressed, Undecodable
from workbench.frontends.grpc.raw_wire import RawInferRequest, RawInferResponse
from workbench.frontends.grpc.rpc import Context, rpc
from workbench.frontends.grpc.settings import SettingsServicer
from workbench.frontends.grpc.shared_memory import SharedMemoryServicer
from workbench.frontends.grpc.shutdown_gate import ShutdownGate, refuse
from workbench.frontends.grpc.stream import StreamCancelled, StreamFailed, StreamSession
from workbench.frontends.header_forward import compile_forward_pattern, forwarded_parameters
from workbench.tracing import RequestTrace

log = logging.getLogger(__name__)

#: Triton's text when a decoupled model does not send exactly one response to ``ModelInfer``


def _sample(server: Server, model: str, context: Context) -> RequestTrace | None:
    """The request's trace when sampled: read timestamps now, ``GRPC_SEND_END`` and the
    release once the RPC is done."""
    trace = server.tracer.sample(model, metadata_carrier(context) if server.tracer.propagates else None)
    if trace is not None:
        now = time.monotonic_ns()
        trace.stamp("GRPC_WAITREAD_START", now)
        trace.stamp("GRPC_WAITREAD_END", now)

        def done(_context: object) -> None:
            trace.stamp("GRPC_SEND_END", time.monotonic_ns())
            trace.release()

        context.add_done_callback(done)
    return trace


def metadata_carrier(context: Context) -> dict[str, str]:
    """The RPC's text metadata as an OpenTelemetry carrier (keys are lower-case in gRPC)."""
    return {key: value for key, value in context.invocation_metadata() or ()
            if isinstance(value, str)}


def _parse(payload: Mapping[str, object] | Sequence[object], message_type: type) -> Any:
    """``payload`` (an engine result: Triton's JSON shape) as a ``message_type`` message."""
    return json_format.ParseDict(payload, message_type(), ignore_unknown_fields=True)


def _no_repository_name(repository_name: str) -> None:
    if repository_name:
        raise Unsupported("'repository_name' specification is not supported")


class GRPCInferenceService(
    SharedMemoryServicer, SettingsServicer, service_pb2_grpc.GRPCInferenceServiceServicer
):
    """Triton's ``inference.GRPCInferenceService`` over one engine.

    The shared-memory RPCs come from :class:`SharedMemoryServicer`, ``LogSettings`` and
    ``TraceSetting`` from :class:`SettingsServicer`.

    Args:
        server: the started engine every RPC calls.
        header_forward_pattern: ``--grpc-header-forward-pattern`` (metadata whose key matches
            become request parameters; "" = none).
        compression_level: ``--grpc-infer-response-compression-level``; other than "none",
            infer responses are gzip-compressed.
        max_stream_unsent: ``--grpc-max-stream-unsent-size``: bytes of ``ModelStreamInfer``
            responses that may wait for the client to read them (:mod:`~workbench.frontends.grpc.stream`).
    """

    def __init__(self, server: Server, header_forward_pattern: str = "",
                 compression_level: str = "none", max_stream_unsent: int = 64 * 1024 * 1024) -> None:
        self.server = server
        self.forward = compile_forward_pattern(header_forward_pattern)
        self.compression = None if compression_level == "none" else grpc.Compression.Gzip
        self.max_stream_unsent = max_stream_unsent
        #: refuses calls that start once the server stops (create_grpc_server sets the server's)
        self.shutdown_gate = ShutdownGate()

    # ------------------------------------------------------------- health & metadata
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        """``live``: the engine is started and not stopped."""
        return pb.ServerLiveResponse(live=self.server.is_live())

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        """``ready``: the engine serves requests (``Server.is_ready``)."""
        return pb.ServerReadyResponse(ready=self.server.is_ready())

    @rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        """``ready`` for a version (or any); an unknown or unloaded model is ``ready: false``
        with OK (Triton's ``ModelIsReady``: grpcclient's ``is_model_ready`` returns False)."""
        return pb.ModelReadyResponse(ready=await self.server.model_ready(request.name, request.version))

    @rpc
    async def ServerMetadata(self, request, context: Context) -> pb.ServerMetadataResponse:
        """Server name, version and protocol extensions."""
        return _parse(await self.server.metadata(), pb.ServerMetadataResponse)

    @rpc
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context):
        """Versions, platform, input and output tensor metadata (shapes with -1 wildcards)."""
        metadata = await self.server.model_metadata(request.name, request.version)
        return _parse(metadata, pb.ModelMetadataResponse)

    @rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context):
        """The normalized ``inference.ModelConfig`` of a READY version."""
        return pb.ModelConfigResponse(config=await self.server.model_config(request.name, request.version))

    @rpc
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Context):
        """Triton's statistics (cumulative ns); unknown model is INVALID_ARGUMENT."""
        statistics = await self.server.statistics(request.name, request.version)
        return _parse(statistics, pb.ModelStatisticsResponse)

    # ------------------------------------------------------------- repository
    @rpc
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Context):
        """Every model in the repositories with version states (``ready`` filters)."""
        _no_repository_name(request.repository_name)
        rows = await self.server.repository_index(ready=request.ready)
        return _parse({"models": rows}, pb.RepositoryIndexResponse)

    @rpc
    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest, context: Context):
        """Load or reload a model (explicit mode); ``config`` (``string_param``) overrides
        config.pbtxt; ``file:<path>`` entries (``bytes_param``) are the files of the folder
        the model then loads from (Triton's repository extension)."""
        _no_repository_name(request.repository_name)
        params = request.parameters
        config = None
        if "config" in params:
            if params["config"].WhichOneof("parameter_choice") != "string_param":
                raise InvalidArgument("Config parameter 'config' must have string type for its value")
            config = params["config"].string_param
        files = {}
        for key, value in params.items():
            if key.startswith("file:"):
                if value.WhichOneof("parameter_choice") != "bytes_param":
                    raise InvalidArgument(
                        f"invalid value type for load parameter '{key}', expected bytes_param."
                    )
                files[key[len("file:"):]] = value.bytes_param
        await self.server.load_model(request.model_name, config, files or None)
        return pb.RepositoryModelLoadResponse()

    @rpc
    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest, context: Context):
        """Unload every version after in-flight requests finish (explicit mode)."""
        _no_repository_name(request.repository_name)
        dependents = request.parameters.get("unload_dependents")
        await self.server.unload_model(request.model_name, bool(dependents and dependents.bool_param))
        return pb.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------- inference
    async def ModelInfer(self, request: pb.ModelInferRequest | RawInferRequest | Undecodable | Compressed,
                         context: Context) -> RawInferResponse:
        """One inference (the hot path): decode, ``Server.infer``, encode outputs raw (the
        request and the answer skip protobuf's copies of tensor bytes: ``raw_wire``). A
        compressed request is inflated and parsed first, off the loop
        (:mod:`~workbench.frontends.grpc.decompression`); bytes that did not parse or inflate
        (:class:`~workbench.frontends.grpc.decompression.Undecodable`) are INVALID_ARGUMENT,
        too large once inflated RESOURCE_EXHAUSTED."""
        if self.shutdown_gate.closed:
            await refuse(context)
        calls = self.shutdown_gate
        calls.calls += 1  # in flight while the gRPC service stops (its countdown)
        try:
            if isinstance(request, (Undecodable, Compressed)):
                request = await resolve(request)
                if isinstance(request, Undecodable):
                    await context.abort(request.code, request.message)
                    raise AssertionError("unreachable: context.abort raises")
            if self.compression is not None:
                context.set_compression(self.compression)
                await context.send_initial_metadata(())  # grpc.aio applies it only then
            trace = _sample(self.server, request.model_name, context) if self.server.tracer.enabled else None
            try:
                decoded, _ = decode_request(request)
                if self.forward is not None:
                    decoded.parameters.update(forwarded_parameters(self.forward, context.invocation_metadata()))
                if trace is None:
                    return encode_raw_response(await self.server.infer(decoded))
                decoded.trace = trace
                answer = await self.server.infer(decoded)
                trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
                response = encode_raw_response(answer)
                trace.stamp("GRPC_SEND_START", time.monotonic_ns())
                return response
            except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
                await context.abort(*grpc_failure(exc, "ModelInfer"))
            raise AssertionError("unreachable: context.abort raises")
        finally:
            calls.calls -= 1

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Bidirectional stream, decoupled models included (``workbench.frontends.grpc.stream``);
        responses come serialized. A stream whose client leaves too many bytes of responses
        unread is cancelled: RESOURCE_EXHAUSTED. With the metadata ``triton_grpc_error: true``
        (Triton's) a failed request ends the stream with its error as the status."""
        calls = self.shutdown_gate
        calls.calls += 1
        try:
            if self.compression is not None:
                context.set_compression(self.compression)
                await context.send_initial_metadata(())  # grpc.aio applies it only then
            forwarded: dict[str, str] | WorkbenchError | None = None
            if self.forward is not None:
                try:
                    forwarded = forwarded_parameters(self.forward, context.invocation_metadata())
                except InvalidArgument as exc:  # every request of the stream fails, as in Triton
                    forwarded = exc
            carrier = metadata_carrier(context) if self.server.tracer.propagates else None
            grpc_error = ("triton_grpc_error", "true") in tuple(context.invocation_metadata() or ())
            session = StreamSession(self.server, forwarded, carrier, self.max_stream_unsent, grpc_error)
            try:
                async for message in session.run(request_iterator):
                    yield message
            except StreamCancelled as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except StreamFailed as exc:
                await context.abort(*grpc_failure(exc.error, "ModelStreamInfer"))
        finally:
            calls.calls -= 1
