"""A defect in a scheduler never strands requests (issue 33, S2): an exception while the
sequence batcher completes a request fails that request with an INTERNAL error naming it, ends
its sequence (its queued requests fail: "the sequence has ended") and the model serves on. The
fault is injected at the backend boundary: the seqprobe backend answers a row whose INPUT is
MALFORMED_VALUE with a response whose outputs are None."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, InternalError, InvalidArgument, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.sequence_probe import MALFORMED_VALUE, PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued

STATE = 'state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]'


def step(sequence_id: int, value: float, start: bool = True) -> InferenceRequest:
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": False}
    return InferenceRequest("probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=params)


async def test_a_completion_that_raises_fails_its_request_and_the_model_serves_on(tmp_path: Path) -> None:
    write_probe_model(tmp_path, strategy=STATE)
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    PROBE.gate.clear()
    try:
        async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
            first = asyncio.ensure_future(server.infer(step(9, 1.0)))
            await PROBE.executing(1)
            malformed = asyncio.ensure_future(server.infer(step(5, MALFORMED_VALUE)))
            innocent = asyncio.ensure_future(server.infer(step(6, 6.0)))
            behind = asyncio.ensure_future(server.infer(step(5, 5.0, start=False)))
            await queued(server, "probe", 3)
            PROBE.gate.set()
            results = await asyncio.wait_for(
                asyncio.gather(first, malformed, innocent, behind, return_exceptions=True), 30)
            later = await asyncio.wait_for(server.infer(step(7, 7.0)), 30)
            stats = (await server.statistics("probe"))["model_stats"][0]["inference_stats"]
    finally:
        PROBE.gate.set()
    answered, failed, served, ended = results
    assert not isinstance(answered, BaseException) and not isinstance(served, BaseException)
    assert isinstance(failed, InternalError)
    assert str(failed).startswith("request failed in the scheduler: TypeError: ")
    assert isinstance(ended, InvalidArgument)
    assert str(ended).endswith("cannot run: the sequence has ended")
    assert later.outputs[0].data.tolist() == [[7.0]]
    assert stats["fail"]["count"] == 2
