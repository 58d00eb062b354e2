"""Sequence batching with ragged inputs (issue 19 item 4): as in Triton's sequence batcher,
requests of different sequences share an execution whatever the shapes of their
``allow_ragged_batch`` inputs (Triton enforces equal shapes only for variable-size inputs that
are not ragged), with the ``direct`` and the ``oldest`` strategy. Observed through the seqprobe
backend (a fake at the backend boundary)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.sequence_probe import PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued

FIXED_INPUT = '{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }'


def step(sequence_id: int, length: int, start: bool = True) -> InferenceRequest:
    data = np.full((1, length), float(sequence_id), np.float32)
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": False}
    return InferenceRequest("probe", [Tensor("INPUT", "FP32", data)], parameters=params)


@pytest.mark.parametrize(("strategy", "ragged", "executions"), [
    ("", True, 2), ("oldest { max_candidate_sequences: 4 }", True, 2),
    ("", False, 3), ("oldest { max_candidate_sequences: 4 }", False, 3),
])
async def test_sequences_with_ragged_inputs_of_other_shapes_share_an_execution(
        tmp_path: Path, strategy: str, ragged: bool, executions: int) -> None:
    """Sequence 9 holds the one instance; sequences 1 and 2 (lengths 2 and 3) queue behind it
    and then run in one execution when INPUT is ragged, in two when it is only variable-size."""
    folder = write_probe_model(tmp_path, strategy=strategy)
    config = folder / "config.pbtxt"
    dims = "dims: [ -1 ] allow_ragged_batch: true" if ragged else "dims: [ -1 ]"
    config.write_text(config.read_text().replace(FIXED_INPUT, f'{{ name: "INPUT" data_type: TYPE_FP32 {dims} }}'))
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    PROBE.gate.clear()
    try:
        async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
            first = asyncio.ensure_future(server.infer(step(9, 1)))
            await PROBE.executing(1)
            others = [asyncio.ensure_future(server.infer(step(c, n))) for c, n in ((1, 2), (2, 3))]
            await queued(server, "probe", 2)
            PROBE.gate.set()
            responses = await asyncio.gather(first, *others)
    finally:
        PROBE.gate.set()
    for response, length in zip(responses, (1, 2, 3), strict=True):
        assert response.outputs[0].data.shape == (1, length)
    assert len(PROBE.executions) == executions
    ready = [sorted(r.corrid for r in rows if r.ready) for _, rows in PROBE.executions[1:]]
    assert ready == ([[1, 2]] if ragged else [[1], [2]])


def _ragged_probe(tmp_path: Path) -> None:
    folder = write_probe_model(tmp_path)
    config = folder / "config.pbtxt"
    ragged = '{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }'
    config.write_text(config.read_text().replace(FIXED_INPUT, ragged))
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    PROBE.gate.clear()


async def test_requests_queued_out_of_slot_order_are_taken_by_identity(tmp_path: Path) -> None:
    """L0_sequence_batcher test_ragged_batch (S2): sequence 1's request (slot 1) queued before
    sequence 9's next one (slot 0). Taking 9's out of the queue compared queued requests by
    value (their numpy inputs: "truth value of an array ... is ambiguous"), and every request
    of the model then waited forever."""
    _ragged_probe(tmp_path)
    try:
        async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
            first = asyncio.ensure_future(server.infer(step(9, 3)))
            await PROBE.executing(1)
            others = [asyncio.ensure_future(server.infer(step(1, 2))),
                      asyncio.ensure_future(server.infer(step(9, 3, start=False)))]
            await queued(server, "probe", 2)
            PROBE.gate.set()
            responses = await asyncio.wait_for(asyncio.gather(first, *others), 30)
    finally:
        PROBE.gate.set()
    assert [r.outputs[0].data.shape for r in responses] == [(1, 3), (1, 2), (1, 3)]
    assert [sorted(r.corrid for r in rows if r.ready) for _, rows in PROBE.executions] == [[9], [1, 9]]
