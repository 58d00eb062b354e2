"""A ``ModelStreamInfer`` stream whose client does not read is cancelled once more than
``--grpc-max-stream-unsent-size`` bytes of responses wait: RESOURCE_EXHAUSTED for the client, its
requests cancelled in the engine, nothing left behind (issue 30, finding 2). The decoupled model
is the repeat test backend (a fake only at the backend boundary; engine and frontend are real)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.frontends.grpc.stream import UNREAD_TEXT
from workbench.testing.repeat_backend import RepeatBackend, write_repeat_model
from workbench.testing.waits import until

LIMIT = 256 * 1024


@pytest_asyncio.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Server]:
    register_backend("repeat", RepeatBackend)
    write_repeat_model(tmp_path, "repeat")
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield server


def repeat(count: int, request_id: str = "") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="repeat", id=request_id,
                                   raw_input_contents=[np.arange(count, dtype=np.int32).tobytes()])
    request.inputs.add(name="IN", datatype="INT32", shape=[count])
    return request


def stream_tasks() -> list[asyncio.Task]:
    """The tasks a ModelStreamInfer session runs (its reader and one per request)."""
    return [task for task in asyncio.all_tasks()
            if task.get_coro().__qualname__.startswith("StreamSession.")]  # type: ignore[union-attr]


class Cancelled(logging.Handler):
    """Sets ``event`` when the frontend logs that it cancelled a stream."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("ModelStreamInfer cancelled"):
            self.event.set()


@pytest.fixture
def cancelled() -> Iterator[Cancelled]:
    handler = Cancelled()
    logger = logging.getLogger("workbench.frontends.grpc.stream")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_a_stream_the_client_does_not_read_is_cancelled(engine: Server, cancelled: Cancelled,
                                                             grpc_serving) -> None:
    async with grpc_serving(engine, grpc_max_stream_unsent_size=LIMIT) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer()
        # 400,000 responses (~25 MB on the wire): far more than the connection's flow-control
        # windows (a few MB) and the 256 KiB bound
        await call.write(repeat(400_000, "flood"))
        await asyncio.wait_for(cancelled.event.wait(), 120)  # the client has read nothing
        await until(lambda: not stream_tasks(), "the stream's tasks to end")
        read = 0
        with pytest.raises(grpc.aio.AioRpcError) as error:
            async for _ in call:  # what was sent before the cancellation, then the status
                read += 1
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.value.details() == UNREAD_TEXT.format(limit=LIMIT)
        assert 0 < read < 400_000
        # the server goes on serving streams
        call = stub.ModelStreamInfer()
        await call.write(repeat(3, "next"))
        await call.done_writing()
        assert len([r async for r in call]) == 3
    assert all(s.pending == 0 for s in engine.model_statistics())


async def test_a_client_that_reads_gets_a_burst_with_the_default_bound(engine: Server, cancelled: Cancelled,
                                                                      grpc_serving) -> None:
    """5,000 responses sent at once stay within the default 64 MiB while the client reads them."""
    async with grpc_serving(engine) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer()
        await call.write(repeat(5_000))
        await call.done_writing()
        responses = [r async for r in call]
    assert len(responses) == 5_000 and not any(r.error_message for r in responses)
    assert not cancelled.event.is_set()


def test_the_flag(tmp_path: Path) -> None:
    from workbench.hosts.cli import build_parser, options_from_args

    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}",
                                      "--grpc-max-stream-unsent-size=1048576"])
    assert options_from_args(args).grpc_max_stream_unsent_size == 1 << 20
    assert ServerOptions().grpc_max_stream_unsent_size == 64 << 20
