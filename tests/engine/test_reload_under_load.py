"""Hot reload drops nothing: a model reloaded again and again (config changes and model file
changes, alternating) while 16 clients keep sending requests, through the engine, over HTTP
(in-process) and in poll mode. Every response is checked; not one may fail.

No timing assertions: between two reloads the test waits for a number of successful
responses (traffic really flows across every switch), never for a duration.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor, Unavailable
from workbench.testing.ensembles import ensemble_config, write_ensemble
from workbench.testing.reload import Tally, atomic_write, churn, run_clients, write_add_sub

RELOADS = 10
CLIENTS = 16
#: successful responses required between two reloads
BETWEEN = 25


def inputs(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Request ``i``: batch 1..8 (valid for max_batch_size 8 and 16), values from ``i``."""
    rows = 1 + i % 8
    a = np.full((rows, 16), float(i % 101), np.float32)
    b = np.tile(np.arange(16, dtype=np.float32), (rows, 1))
    return a, b


async def infer_checked(server: Server, i: int) -> None:
    a, b = inputs(i)
    response = await server.infer(
        InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)])
    )
    outputs = {t.name: t.data for t in response.outputs}
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


#: an ensemble over add_sub (max_batch_size 8: fits every config :func:`churn` writes)
ENS_ADD = ensemble_config(
    "ens_add", [("IN0", "TYPE_FP32", [16]), ("IN1", "TYPE_FP32", [16])],
    [("SUM", "TYPE_FP32", [16]), ("DIFF", "TYPE_FP32", [16])],
    [("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"})],
)


async def infer_ensemble_checked(server: Server, i: int) -> None:
    a, b = inputs(i)
    response = await server.infer(
        InferenceRequest("ens_add", [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", b)])
    )
    outputs = {t.name: t.data for t in response.outputs}
    np.testing.assert_array_equal(outputs["SUM"], a + b)
    np.testing.assert_array_equal(outputs["DIFF"], a - b)


async def until(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Wait (polling the loop) until ``predicate()`` is true; generous timeout for a busy
    2-core machine, never part of what is asserted."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await _call(predicate):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def _call(predicate) -> bool:
    result = predicate()
    return await result if asyncio.iscoroutine(result) else bool(result)


def expected_config(step: int) -> tuple[int, int] | None:
    """(max_batch_size, instance count) after reload ``step`` (None: a model file step)."""
    if step % 2 == 0:
        return None
    return (16, 1) if (step // 2) % 2 == 0 else (8, 2)


async def check_config(server: Server, step: int) -> bool:
    expected = expected_config(step)
    if expected is None:
        return True
    config = await server.model_config("add_sub")
    return (config.max_batch_size, config.instance_group[0].count) == expected


async def churn_under_load(server: Server, folder: Path, reload, tally: Tally, send=infer_checked) -> None:
    """Clients run ``send(server, i)`` while ``reload(step)`` is awaited after each change of
    the model files."""
    stop = asyncio.Event()
    clients = asyncio.ensure_future(run_clients(partial(send, server), CLIENTS, stop, tally))
    try:
        for step in range(1, RELOADS + 1):
            await until(lambda s=step: tally.ok >= s * BETWEEN or tally.failed, "traffic")
            churn(folder, step)
            await reload(step)
            assert await check_config(server, step)
        await until(lambda: tally.ok >= (RELOADS + 1) * BETWEEN or tally.failed, "traffic")
    finally:
        stop.set()
        await clients
    print(f"\n{RELOADS} reloads under {CLIENTS} clients: {tally.ok} responses ok, {tally.failed} failed")
    assert tally.failed == 0, tally.errors
    assert tally.ok >= (RELOADS + 1) * BETWEEN


async def test_explicit_reloads_under_load_fail_no_request(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["add_sub"])
    async with Server(options) as server:

        async def reload(step: int) -> None:
            await server.load_model("add_sub")

        await churn_under_load(server, folder, reload, Tally())


async def test_composing_model_reloads_fail_no_ensemble_request(tmp_path: Path) -> None:
    """Each reload of add_sub re-checks ens_add (it still fits): the ensemble stays READY
    and every ensemble request in flight or arriving across the switches succeeds."""
    folder = write_add_sub(tmp_path)
    write_ensemble(tmp_path, "ens_add", ENS_ADD)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["ens_add"])
    async with Server(options) as server:
        serving = server.lifecycle.models["ens_add"].latest_ready

        async def reload(step: int) -> None:
            await server.load_model("add_sub")
            assert server.lifecycle.models["ens_add"].latest_ready is serving

        await churn_under_load(server, folder, reload, Tally(), infer_ensemble_checked)


async def test_http_reloads_under_load_fail_no_request(tmp_path: Path, asgi_client) -> None:
    folder = write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["add_sub"])
    async with Server(options) as server, asgi_client(server) as http:
        stop = asyncio.Event()
        tally = Tally()

        async def infer_http(i: int) -> None:
            a, b = inputs(i)
            body = {"inputs": [
                {"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
                for name, x in (("INPUT0", a), ("INPUT1", b))
            ]}
            reply = await http.post("/v2/models/add_sub/infer", json=body)
            assert reply.status_code == 200, reply.text
            outputs = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                       for o in reply.json()["outputs"]}
            np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
            np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)

        clients = asyncio.ensure_future(run_clients(infer_http, CLIENTS, stop, tally))
        try:
            for step in range(1, RELOADS + 1):
                await until(lambda s=step: tally.ok >= s * BETWEEN or tally.failed, "traffic")
                churn(folder, step)
                reply = await http.post("/v2/repository/models/add_sub/load")
                assert reply.status_code == 200, reply.text
                assert await check_config(server, step)
            await until(lambda: tally.ok >= (RELOADS + 1) * BETWEEN or tally.failed, "traffic")
        finally:
            stop.set()
            await clients
        print(f"\n{RELOADS} HTTP reloads under {CLIENTS} clients: {tally.ok} ok, {tally.failed} failed")
        assert tally.failed == 0, tally.errors


async def test_poll_reloads_under_load_fail_no_request(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0.05)
    async with Server(options) as server:
        with pytest.raises(Unavailable, match="explicit model load / unload is not allowed"):
            await server.load_model("add_sub")

        async def reload(step: int) -> None:  # wait for the poll to apply the change
            before = server.lifecycle.models["add_sub"].latest_ready
            await until(lambda: server.lifecycle.models["add_sub"].latest_ready is not before, "the poll")

        await churn_under_load(server, folder, reload, Tally())


def churn_accumulator(folder: Path, step: int) -> None:
    """Reload ``step`` of the accumulator: odd steps switch between 1 and 2 instances,
    even steps rewrite version 1's model file (same graph, new bytes)."""
    if step % 2:
        config = (folder / "config.pbtxt").read_text()
        count = 2 if (step // 2) % 2 == 0 else 1
        atomic_write(folder / "config.pbtxt", re.sub(r"count: \d+ ", f"count: {count} ", config))
        return
    model = onnx.load(folder / "1" / "model.onnx")
    model.doc_string = f"generation {step}"
    atomic_write(folder / "1" / "model.onnx", model.SerializeToString())


async def test_reloads_mid_sequence_fail_no_request_and_lose_no_state(
    sample_repository: Path, tmp_path: Path
) -> None:
    """16 clients each run sequences of 2..8 requests on the sample accumulator back to
    back (a new correlation ID each) while it reloads 10 times: every running sum must be
    exact, whichever version the sequence started on (one "ok" = one whole sequence)."""
    folder = tmp_path / "accumulator"
    shutil.copytree(sample_repository / "accumulator", folder)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["accumulator"])
    async with Server(options) as server:

        async def sequence(i: int) -> None:
            rng = random.Random(i)
            values = [float(rng.randint(1, 9)) for _ in range(rng.randint(2, 8))]
            total = 0.0
            for k, value in enumerate(values):
                params = {"sequence_id": i + 1, "sequence_start": k == 0,
                          "sequence_end": k == len(values) - 1}
                data = np.full((1, 1), value, np.float32)
                response = await server.infer(InferenceRequest(
                    "accumulator", [Tensor("INPUT", "FP32", data)], parameters=params))
                total += value
                assert float(response.outputs[0].data[0, 0]) == total, (i, k)

        async def reload(step: int) -> None:
            await server.load_model("accumulator")

        stop = asyncio.Event()
        tally = Tally()
        clients = asyncio.ensure_future(run_clients(sequence, CLIENTS, stop, tally))
        try:
            for step in range(1, RELOADS + 1):
                await until(lambda s=step: tally.ok >= s * BETWEEN or tally.failed, "traffic")
                churn_accumulator(folder, step)
                await reload(step)
            await until(lambda: tally.ok >= (RELOADS + 1) * BETWEEN or tally.failed, "traffic")
        finally:
            stop.set()
            await clients
        print(f"\n{RELOADS} reloads under {CLIENTS} sequence clients: {tally.ok} sequences ok, "
              f"{tally.failed} failed")
        assert tally.failed == 0, tally.errors
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 60)  # every old version unloaded
