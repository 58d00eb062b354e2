"""An HTTP client that disconnects abandons its request: the queued request is dropped and
counted as CANCELED (as the gRPC path does), so the next client does not wait behind it.

The model is the fake backend (tests' backend boundary) blocked on its gate, so the queue is
observable; the HTTP listener is real uvicorn with raw socket clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from workbench import ServerOptions
from workbench.backends.registry import register_backend
from workbench.frontends.http.protocol import CoalescingHttpToolsProtocol
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.http_listener import http_listener


def infer_request(value: float) -> bytes:
    body = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1],
                                     "data": [value]}]})
    return (b"POST /v2/models/fake/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (yielding to the loop) until ``condition()`` holds."""
    async def holds() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(holds(), timeout_s)  # asyncio.timeout is Python 3.11+


@pytest.fixture
def fake_repository(tmp_path: Path):
    register_backend("fake", FakeBackend)
    write_fake_model(tmp_path, "fake", count=1)
    BEHAVIOUR.reset()
    yield tmp_path
    BEHAVIOUR.gate.set()


async def test_a_disconnected_clients_queued_request_is_dropped(fake_repository: Path) -> None:
    async with http_listener(ServerOptions(model_repository=[str(fake_repository)])) as clients:
        [stats] = [s for s in clients.server.model_statistics() if s.name == "fake"]
        BEHAVIOUR.gate.clear()
        try:
            await abandon_a_queued_request(clients, stats)
        finally:
            BEHAVIOUR.gate.set()  # never leave the shutdown waiting on a blocked execution


async def abandon_a_queued_request(clients, stats) -> None:
    first_reader, first = await clients.connect()
    first.write(infer_request(1))  # executes, blocked on the gate
    await until(lambda: sum(BEHAVIOUR.executions.values()) == 1)
    _, abandoned = await clients.connect()
    abandoned.write(infer_request(99))  # queued behind it
    await until(lambda: stats.pending == 1)
    tasks = clients.service.server_state.tasks
    assert len(tasks) == 2
    abandoned.close()
    await until(lambda: len(tasks) == 1)  # its request handler has given up
    BEHAVIOUR.gate.set()
    head = await asyncio.wait_for(first_reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200 ")
    next_reader, following = await clients.connect()
    following.write(infer_request(2))
    assert (await asyncio.wait_for(next_reader.readuntil(b"\r\n\r\n"), 10)).startswith(b"HTTP/1.1 200 ")
    assert BEHAVIOUR.batches == [[1.0], [2.0]]  # 99 never executed
    assert stats.failures == {"CANCELED": 1} and stats.pending == 0


async def test_a_waiting_request_is_watched_through_its_connection_not_a_task(fake_repository: Path) -> None:
    """While a request waits for the engine, its connection holds one disconnect callback and
    no watcher task runs beside the request handler (one task per request, not two)."""
    async with http_listener(ServerOptions(model_repository=[str(fake_repository)])) as clients:
        BEHAVIOUR.gate.clear()
        try:
            reader, writer = await clients.connect()
            writer.write(infer_request(1))
            await until(lambda: sum(BEHAVIOUR.executions.values()) == 1)
            [connection] = clients.service.server_state.connections
            assert isinstance(connection, CoalescingHttpToolsProtocol)
            assert len(connection.disconnect_callbacks) == 1
            handlers = [t for t in asyncio.all_tasks() if "DisconnectWatch._watch" in repr(t.get_coro())]
            assert handlers == []
            BEHAVIOUR.gate.set()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200 ")
            assert connection.disconnect_callbacks == set()  # answered: nothing left to watch
        finally:
            BEHAVIOUR.gate.set()


async def test_outside_workbenchs_protocol_a_watcher_task_sees_the_disconnect() -> None:
    """Under another ASGI server (no disconnect extension in the scope) the watch falls back
    to a task awaiting ``http.disconnect``; it cancels the waiting request."""
    from workbench.frontends.http.infer_asgi import DisconnectWatch

    said: asyncio.Queue = asyncio.Queue()

    async def receive() -> dict:
        return await said.get()

    async def waits() -> bool:
        async with DisconnectWatch(receive, {"type": "http"}) as watch:
            await asyncio.Event().wait()
        return watch.dropped

    task = asyncio.create_task(waits())
    await asyncio.sleep(0)
    said.put_nowait({"type": "http.disconnect"})
    assert await asyncio.wait_for(task, 5) is True
