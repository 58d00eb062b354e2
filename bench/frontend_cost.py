"""Event-loop CPU of the frontends alone, per infer request (issue 20, target 1).

Drives the real HTTP stack (workbench's uvicorn protocol with its connection guard, the
RequestGuard, the infer fast path, the codec) through a fake transport, and the real gRPC
``ModelInfer`` handler (raw_wire parser, decoding registration, service, codec, serializer)
with a fake context, both over a stub engine that answers at once with the `mlp` model's
output (1x16 FP32) for its input (1x64 FP32, as perf_analyzer sends it). What is left out:
the engine, the kernel's sockets, grpc.aio's own machinery. The number is CPU seconds of
this thread (``time.thread_time``) per request, so it says how much Python work a request
costs the frontend, with the machine's noise much smaller than in a served benchmark.

Usage (alternate two checkouts inside one locked run, compare the ratio):
    flock /tmp/bench.lock env PYTHONPATH=<checkout> python bench/frontend_cost.py http|grpc [N]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import zlib
from typing import Any

import numpy as np
import orjson
import uvloop

from workbench import InferenceResponse, ServerOptions, tensor_from_buffer

INPUT = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
OUTPUT = np.arange(16, dtype=np.float32).reshape(1, 16)


class StubTracer:
    enabled = False
    propagates = False


class Anything:
    """Every attribute is a no-op function (for what the app captures at build time)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class StubServer:
    """Answers every infer at once (the frontend is what is measured, not the engine)."""

    def __init__(self) -> None:
        self.options = ServerOptions(model_repository=["/nonexistent"])
        self.tracer = StubTracer()
        self.shared_memory = Anything()  # only captured by the routes the bench never calls

    async def infer(self, request: Any) -> InferenceResponse:
        out = tensor_from_buffer("OUTPUT0", "FP32", [1, 16], OUTPUT.tobytes(), model="mlp")
        return InferenceResponse(model_name="mlp", model_version="1", outputs=[out], id=request.id)


class FakeTransport:
    """Collects what the protocol writes; ``done`` once a whole response is out."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.done = asyncio.Event()

    def _check(self) -> None:
        head, sep, body = bytes(self.out).partition(b"\r\n\r\n")
        if sep:
            length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])[b"content-length"])
            if len(body) >= length:
                self.done.set()

    def write(self, data: bytes) -> None:
        self.out += data
        self._check()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.out += chunk
        self._check()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, *args: Any) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def http_request() -> bytes:
    """The request perf_analyzer's HTTP client sends for mlp (binary input and output)."""
    header = orjson.dumps({
        "inputs": [{"name": "INPUT0", "shape": [1, 64], "datatype": "FP32",
                    "parameters": {"binary_data_size": INPUT.nbytes}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    })
    body = header + INPUT.tobytes()
    return (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: localhost:8000\r\nAccept: */*\r\n"
            b"Inference-Header-Content-Length: %d\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(header), len(body), body))


async def http_cost(n: int) -> tuple[float, bytes]:
    from uvicorn.server import ServerState

    from workbench.serving.http_service import http_service

    config = http_service(StubServer(), ServerOptions(model_repository=["/nonexistent"])).config  # type: ignore[arg-type]
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={},
                                          _loop=asyncio.get_running_loop())  # type: ignore[call-arg]
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    request = http_request()
    answer = b""
    start = time.thread_time()
    for _ in range(n):
        transport.out.clear()
        transport.done.clear()
        protocol.data_received(request)
        await transport.done.wait()
        answer = bytes(transport.out)
    return (time.thread_time() - start) / n, answer


class FakeContext:
    def invocation_metadata(self) -> tuple:
        return ()

    def add_done_callback(self, callback: Any) -> None:
        pass

    async def abort(self, code: Any, message: str) -> None:
        raise RuntimeError(f"{code}: {message}")


class Recorder:
    handlers: dict

    def add_generic_rpc_handlers(self, _: Any) -> None:
        pass

    def add_registered_method_handlers(self, _: str, handlers: dict) -> None:
        self.handlers = handlers


async def grpc_cost(n: int) -> tuple[float, bytes]:
    from tritonclient.grpc import service_pb2 as pb

    from workbench.frontends.grpc.decoding import add_service
    from workbench.frontends.grpc.service import GRPCInferenceService

    recorder = Recorder()
    add_service(GRPCInferenceService(StubServer()), recorder, 64 << 20)  # type: ignore
    handler = recorder.handlers["ModelInfer"]
    message = pb.ModelInferRequest(model_name="mlp", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="INPUT0", datatype="FP32", shape=[1, 64])], raw_input_contents=[INPUT.tobytes()])
    message.parameters["triton_enable_empty_final_response"].bool_param = False
    message.outputs.add(name="OUTPUT0")
    raw, context, answer = message.SerializeToString(), FakeContext(), b""
    start = time.thread_time()
    for _ in range(n):
        request = handler.request_deserializer(raw)
        response = await handler.unary_unary(request, context)
        answer = handler.response_serializer(response)
    return (time.thread_time() - start) / n, answer


def calls_per_request(cost: Any, n: int = 200) -> tuple[float, float]:
    """(Python function calls, C function calls) per request, counted with ``sys.setprofile``:
    the count of ``2n`` requests less that of ``n`` (the set-up cancels out), over ``n``; a
    number the machine's noise cannot change."""
    uvloop.run(cost(50))  # warm: imports, caches

    def count(requests: int) -> dict[str, int]:
        counts = {"call": 0, "c_call": 0}

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event in counts:
                counts[event] += 1

        async def counted() -> None:
            sys.setprofile(profile)
            try:
                await cost(requests)
            finally:
                sys.setprofile(None)

        uvloop.run(counted())
        return counts

    one, two = count(n), count(2 * n)
    return (two["call"] - one["call"]) / n, (two["c_call"] - one["c_call"]) / n


def main() -> None:
    proto = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    cost = http_cost if proto == "http" else grpc_cost
    python_calls, c_calls = calls_per_request(cost)
    print(f"{proto} frontend calls/request: {python_calls:.1f} Python, {c_calls:.1f} C")
    runs = []
    answer = b""
    for _ in range(5):
        seconds, answer = uvloop.run(cost(n // 5))
        runs.append(seconds * 1e6)
    print(f"{proto} frontend us/request: median {statistics.median(runs):.1f} "
          f"(runs {' '.join(f'{r:.1f}' for r in runs)}) answer {len(answer)} bytes "
          f"crc32 {zlib.crc32(answer):08x}")


if __name__ == "__main__":
    main()
