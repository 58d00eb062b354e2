"""``--grpc-infer-response-compression-level``: infer responses are compressed (gzip) when the
level is not ``none``, as tritonserver compresses them at the level asked. gRPC's own trace
(``GRPC_TRACE=compression``, read in a subprocess: grpc reads it at start) tells what the
server's compression filter did with each message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = r'''
import asyncio, sys
import grpc, numpy as np
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc
from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server

async def main(repo, level):
    async with Server(ServerOptions(model_repository=[repo])) as server:
        options = ServerOptions(grpc_address="127.0.0.1", grpc_port=0,
                                grpc_infer_response_compression_level=level)
        grpc_server, port = create_grpc_server(server, options)
        await grpc_server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            a = np.zeros((1, 16), np.float32)
            inputs = [pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32",
                                                             shape=a.shape) for i in range(2)]
            request = pb.ModelInferRequest(model_name="add_sub", inputs=inputs,
                                           raw_input_contents=[a.tobytes()] * 2)
            reply = await stub.ModelInfer(request)
            assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [0.0] * 16
            call = stub.ModelStreamInfer()
            await call.write(request)
            await call.done_writing()
            assert [not r.error_message async for r in call] == [True]
        await grpc_server.stop(None)
    print("CLIENT OK")

asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def _trace(repo: Path, level: str) -> str:
    env = {**os.environ, "GRPC_TRACE": "compression", "GRPC_VERBOSITY": "DEBUG"}
    done = subprocess.run([sys.executable, "-c", CLIENT, str(repo), level], env=env,
                          capture_output=True, text=True, timeout=120)
    assert "CLIENT OK" in done.stdout, done.stderr[-3000:]
    return done.stderr


@pytest.mark.parametrize("level", ["high", "low"])
def test_infer_responses_are_compressed(test_repository: Path, level: str) -> None:
    # the unary response and the stream response, each compressed by the server
    assert _trace(test_repository, level).count("Compressed[gzip]") == 2


def test_no_compression_by_default(test_repository: Path) -> None:
    assert "Compressed[" not in _trace(test_repository, "none")


def test_flag_values(tmp_path: Path) -> None:
    from workbench.hosts.cli import build_parser, options_from_args

    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}",
                                      "--grpc-infer-response-compression-level=HIGH"])
    assert options_from_args(args).grpc_infer_response_compression_level == "high"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", f"--model-repository={tmp_path}",
                                   "--grpc-infer-response-compression-level=max"])
