"""How fast can grpc.aio answer ModelInfer on this machine, before any inference work?

A grpc.aio ``GRPCInferenceService`` that answers every ModelInfer with a fixed
mlp-shaped response ([1, 16] FP32), to separate grpc.aio's own per-call cost from
workbench's. Point perf_analyzer at it as at the real server (it serves the model
``mlp``: INPUT0 FP32 [-1, 64] -> OUTPUT0 FP32 [-1, 16]):

    .venv/bin/python bench/grpc_ceiling.py --mode bare --port 8301 &
    perf_analyzer -m mlp -u localhost:8301 -i grpc --concurrency-range 16 -p 3000 -r 3 -s 999 \
        --measurement-mode time_windows

Modes:
    bare     build the response message and return it;
    codec    also decode the request and encode the response with workbench's gRPC codec;
    suspend  as codec, plus one ``await asyncio.sleep(0)`` (the suspension every real
             request makes while it waits for the engine).
Results: bench/RESULTS.md, "Issue 4".
"""

from __future__ import annotations

import argparse
import asyncio

import grpc
import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from workbench import InferenceResponse, Tensor
from workbench.frontends.grpc.codec import decode_request, encode_response

OUTPUT = np.zeros((1, 16), np.float32)


class CeilingService(pbg.GRPCInferenceServiceServicer):
    """Just enough of the service for perf_analyzer; ModelInfer does no inference."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=True)

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="grpc_ceiling", version="0", extensions=[])

    async def ModelMetadata(self, request, context):
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name="mlp", versions=["1"], platform="onnxruntime_onnx",
            inputs=[tensor(name="INPUT0", datatype="FP32", shape=[-1, 64])],
            outputs=[tensor(name="OUTPUT0", datatype="FP32", shape=[-1, 16])])

    async def ModelConfig(self, request, context):
        config = mc.ModelConfig(name="mlp", platform="onnxruntime_onnx", max_batch_size=32)
        config.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[64])
        config.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[16])
        return pb.ModelConfigResponse(config=config)

    async def ModelStatistics(self, request, context):
        return pb.ModelStatisticsResponse()

    async def ModelInfer(self, request, context):
        if self.mode == "bare":
            response = pb.ModelInferResponse(model_name="mlp", model_version="1", id=request.id)
            output = response.outputs.add(name="OUTPUT0", datatype="FP32")
            output.shape.extend([1, 16])
            response.raw_output_contents.append(OUTPUT.tobytes())
            return response
        decoded, _ = decode_request(request)
        if self.mode == "suspend":
            await asyncio.sleep(0)
        return encode_response(InferenceResponse("mlp", "1", [Tensor("OUTPUT0", "FP32", OUTPUT)], decoded.id))


async def serve(mode: str, port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    pbg.add_GRPCInferenceServiceServicer_to_server(CeilingService(mode), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["bare", "codec", "suspend"], default="bare")
    parser.add_argument("--port", type=int, default=8301)
    args = parser.parse_args()
    import uvloop  # the loop workbench serve runs on

    uvloop.run(serve(args.mode, args.port))


if __name__ == "__main__":
    main()
