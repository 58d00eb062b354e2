"""A stopping engine logs tritonserver's countdown of in-flight inferences (``Server::Stop``):
``Timeout N: Found K model versions that have in-flight inferences`` and, for each,
``Model 'm' (version v) has N in-flight inferences``, once a second until none is left
(L0_lifecycle ``test_shutdown_sequence`` greps the second line)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.serving.drain import drain_engine
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, fake_request, write_fake_model


class _Seen(logging.Handler):
    """Sets ``event`` once a record's message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = asyncio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if self.text in self.messages[-1]:
            self.event.set()


async def test_drain_logs_the_in_flight_inferences_of_each_version(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=1)
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    server = Server(ServerOptions(model_repository=[str(tmp_path)], exit_timeout_secs=30))
    await server.start()
    seen = _Seen("has 2 in-flight inferences")
    logger = logging.getLogger("workbench")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(seen)
    BEHAVIOUR.gate.clear()
    try:
        requests = [asyncio.create_task(server.infer(fake_request("m", v))) for v in (1.0, 2.0)]
        await BEHAVIOUR.executing(1)  # one executes, one is queued: both in flight
        drain = asyncio.create_task(drain_engine(server, server.options, None))
        await asyncio.wait_for(seen.event.wait(), 10)
        BEHAVIOUR.gate.set()
        await asyncio.gather(*requests)
        assert await drain
    finally:
        BEHAVIOUR.gate.set()
        logger.removeHandler(seen)
        logger.setLevel(level)
        await server.stop()
    assert "Timeout 30: Found 1 model versions that have in-flight inferences" in seen.messages
    assert "Model 'm' (version 1) has 2 in-flight inferences" in seen.messages


async def test_a_sequence_batchers_live_sequences_are_its_in_flight_inferences(tmp_path: Path) -> None:
    """Triton counts a sequence batcher's live sequences (those holding a slot), answered or
    not: two sequences started and not ended are "2 in-flight inferences" (L0_lifecycle
    ``test_shutdown_sequence``)."""
    write_fake_model(tmp_path, "seq", count=1, extra="sequence_batching { max_sequence_idle_microseconds: 2000000 }")
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    server = Server(ServerOptions(model_repository=[str(tmp_path)], exit_timeout_secs=30))
    await server.start()
    try:
        for sequence_id in (1, 2):
            request = fake_request("seq")
            request.parameters = {"sequence_id": sequence_id, "sequence_start": True}
            await server.infer(request)
        assert server.lifecycle.inflight_status() == [("seq", 1, 2)]
    finally:
        await server.stop()
