"""Ensembles on the real engine and real ONNX models: outputs, DAG concurrency, batching in
the composing models, failing steps, parameters, statistics, HTTP and gRPC."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import (
    InferenceRequest,
    InvalidArgument,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.backends.registry import register_backend
from workbench.common.errors import WorkbenchError
from workbench.common.results import ModelStats
from workbench.testing.ensembles import (
    build_ensemble_repository,
    build_fake_ensemble_repository,
    ensemble_config,
    write_ensemble,
)
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend


@pytest.fixture(scope="module")
def ensemble_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble_repository(tmp_path_factory.mktemp("ensembles"))


@pytest_asyncio.fixture
async def server(ensemble_repository: Path):
    async with Server(ServerOptions(model_repository=[str(ensemble_repository)])) as engine:
        yield engine


def pair(name: str, a: np.ndarray, b: np.ndarray, **kwargs) -> InferenceRequest:
    return InferenceRequest(name, [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", b)], **kwargs)


def outputs_of(response) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in response.outputs}


async def stats_of(server: Server, name: str) -> ModelStats:
    return (await server.statistics(name))["model_stats"][0]


A = np.arange(32, dtype=np.float32).reshape(2, 16)
B = np.full((2, 16), 3.0, np.float32)


async def test_chain_diamond_and_nested_ensembles(server: Server) -> None:
    chain = await server.infer(pair("ens_chain", A, B, id="r1"))
    assert (chain.model_name, chain.model_version, chain.id) == ("ens_chain", "1", "r1")
    assert [t.name for t in chain.outputs] == ["SUM", "DIFF"]
    assert [t.datatype for t in chain.outputs] == ["FP32", "FP32"]
    np.testing.assert_array_equal(outputs_of(chain)["SUM"], A + B)
    np.testing.assert_array_equal(outputs_of(chain)["DIFF"], A - B)
    diamond = outputs_of(await server.infer(pair("ens_diamond", A, B)))
    np.testing.assert_array_equal(diamond["OUT0"], 2 * A)
    np.testing.assert_array_equal(diamond["OUT1"], 2 * B)
    nested = outputs_of(await server.infer(pair("ens_nested", A, B)))
    np.testing.assert_array_equal(nested["SUM"], 2 * A + 2 * B)
    np.testing.assert_array_equal(nested["DIFF"], 2 * A - 2 * B)


async def test_only_requested_outputs_are_returned(server: Server) -> None:
    response = await server.infer(pair("ens_chain", A, B, outputs=[RequestedOutput("DIFF")]))
    assert [t.name for t in response.outputs] == ["DIFF"]
    np.testing.assert_array_equal(response.outputs[0].data, A - B)


async def test_ensemble_request_is_validated_against_the_ensemble_config(server: Server) -> None:
    with pytest.raises(InvalidArgument, match=r"unexpected shape for input 'IN0' for model 'ens_chain'"):
        await server.infer(pair("ens_chain", A[:, :8], B[:, :8]))
    with pytest.raises(InvalidArgument, match=r"batch-size must be <= 8 for 'ens_chain'"):
        big = np.zeros((9, 16), np.float32)
        await server.infer(pair("ens_chain", big, big))


async def test_metadata_and_config_of_an_ensemble(server: Server) -> None:
    meta = await server.model_metadata("ens_chain")
    assert meta["platform"] == "ensemble" and meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "IN0", "datatype": "FP32", "shape": [-1, 16]}
    config = await server.model_config("ens_chain")
    assert config.platform == "ensemble" and not config.backend
    assert not config.instance_group and not config.HasField("optimization")
    assert [s.model_name for s in config.ensemble_scheduling.step] == ["add_sub", "identity16"]


async def test_failing_step_fails_only_its_request(server: Server) -> None:
    good = [pair("ens_any", np.full((1, 4), i, np.float32), np.ones((1, 4), np.float32)) for i in range(20)]
    bad = pair("ens_any", np.ones((1, 3), np.float32), np.ones((1, 4), np.float32))
    results = await asyncio.gather(*(server.infer(r) for r in [*good[:10], bad, *good[10:]]),
                                   return_exceptions=True)
    failure = results[10]
    same_inputs = [Tensor(f"INPUT{i}", "FP32", bad.inputs[i].data) for i in range(2)]
    direct = await asyncio.gather(server.infer(InferenceRequest("add_sub_any", same_inputs)),
                                  return_exceptions=True)
    # the step's error, prefixed as Triton's EnsembleContext::FinishEnsemble does
    assert type(failure) is type(direct[0])
    assert str(failure) == f"in ensemble 'ens_any', {direct[0]}"
    for i, result in enumerate(results[:10] + results[11:]):
        np.testing.assert_array_equal(outputs_of(result)["OUT"], np.full((1, 4), i + 1, np.float32))
    ensemble = await stats_of(server, "ens_any")
    assert ensemble["inference_stats"]["success"]["count"] == 20
    assert ensemble["inference_stats"]["fail"]["count"] == 1
    live = {s.name: s for s in server.model_statistics()}
    assert live["ens_any"].failures == {"OTHER": 1}  # Triton: an ensemble's failures are OTHER
    assert live["add_sub_any"].failures == {"BACKEND": 2}  # the step's and the direct request


async def test_independent_steps_run_concurrently(tmp_path: Path) -> None:
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    BEHAVIOUR.barrier = threading.Barrier(2, timeout=5)  # both steps must execute at once
    repo = build_fake_ensemble_repository(tmp_path)
    try:
        async with Server(ServerOptions(model_repository=[str(repo)])) as server:
            data = np.array([[7.0]], np.float32)
            response = await server.infer(InferenceRequest("ens_fake_pair", [Tensor("IN", "FP32", data)]))
            assert [t.name for t in response.outputs] == ["A", "B"]
            for tensor in response.outputs:
                np.testing.assert_array_equal(tensor.data, data)
            assert sorted(BEHAVIOUR.executions) == ["fake_a_0_0", "fake_b_0_0"]
    finally:
        BEHAVIOUR.reset()


async def test_many_concurrent_requests_batch_in_the_composing_models(server: Server) -> None:
    rng = np.random.default_rng(0)
    inputs = [(rng.random((1, 16), np.float32), rng.random((1, 16), np.float32)) for _ in range(200)]
    responses = await asyncio.gather(*(server.infer(pair("ens_chain", a, b)) for a, b in inputs))
    for (a, b), response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(outputs_of(response)["SUM"], a + b)
        np.testing.assert_array_equal(outputs_of(response)["DIFF"], a - b)
    for name in ("add_sub", "identity16"):
        stats = await stats_of(server, name)
        assert stats["inference_count"] == 200
        assert stats["execution_count"] < stats["inference_count"], name
        assert max(b["batch_size"] for b in stats["batch_stats"]) > 1
    ensemble = await stats_of(server, "ens_chain")
    assert ensemble["inference_stats"]["success"]["count"] == 200
    assert (ensemble["inference_count"], ensemble["execution_count"]) == (200, 200)


async def test_statistics_of_the_ensemble_and_its_steps(server: Server) -> None:
    await server.infer(pair("ens_chain", A, B))
    ensemble, add_sub, identity = [await stats_of(server, n) for n in ("ens_chain", "add_sub", "identity16")]
    assert (ensemble["inference_count"], ensemble["execution_count"]) == (2, 1)
    assert [b["batch_size"] for b in ensemble["batch_stats"]] == [2]
    infer = ensemble["inference_stats"]
    assert infer["success"]["count"] == 1 and infer["fail"]["count"] == 0
    assert infer["queue"]["count"] == 1
    steps = (add_sub["inference_stats"], identity["inference_stats"])
    for phase in ("compute_input", "compute_infer", "compute_output"):
        # Triton: an ensemble's compute durations are the sums of its steps'
        assert infer[phase]["ns"] == sum(step[phase]["ns"] for step in steps)
    assert infer["success"]["ns"] >= sum(step["success"]["ns"] for step in steps)
    for model in (add_sub, identity):
        assert model["inference_stats"]["success"]["count"] == 1 and model["inference_count"] == 2
    nested_before = await stats_of(server, "ens_diamond")
    await server.infer(pair("ens_nested", A, B))
    nested, diamond, chain = [await stats_of(server, n) for n in ("ens_nested", "ens_diamond", "ens_chain")]
    assert diamond["inference_stats"]["success"]["count"] == nested_before["inference_stats"]["success"]["count"] + 1
    inner = (diamond["inference_stats"]["compute_infer"]["ns"] + chain["inference_stats"]["compute_infer"]["ns"]
             - ensemble["inference_stats"]["compute_infer"]["ns"])  # ens_chain ran once before
    assert nested["inference_stats"]["compute_infer"]["ns"] == inner


async def test_sequence_flags_reach_the_step(server: Server) -> None:
    async def send(value: float, start: bool = False, end: bool = False) -> float:
        params = {"sequence_id": 77, "sequence_start": start, "sequence_end": end}
        data = np.array([[value]], np.float32)
        response = await server.infer(InferenceRequest("ens_sequence", [Tensor("IN", "FP32", data)], parameters=params))
        return float(response.outputs[0].data[0, 0])

    assert [await send(1, start=True), await send(2), await send(3, end=True)] == [1, 3, 6]
    with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation ID"):
        await server.infer(InferenceRequest("ens_sequence", [Tensor("IN", "FP32", np.ones((1, 1), np.float32))]))


async def test_response_cache_at_ensemble_level(ensemble_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(ensemble_repository)], response_cache_byte_size=1 << 20)
    async with Server(options) as server:
        first = await server.infer(pair("ens_cached", A, B))
        second = await server.infer(pair("ens_cached", A, B))
        np.testing.assert_array_equal(outputs_of(first)["SUM"], outputs_of(second)["SUM"])
        cached = (await stats_of(server, "ens_cached"))["inference_stats"]
        assert (cached["cache_hit"]["count"], cached["cache_miss"]["count"]) == (1, 1)
        assert (await stats_of(server, "add_sub"))["inference_count"] == 2  # one execution


async def test_http_infer_through_an_ensemble(server: Server, asgi_client) -> None:
    body = {
        "id": "h1",
        "inputs": [
            {"name": "IN0", "shape": [2, 16], "datatype": "FP32", "data": A.ravel().tolist()},
            {"name": "IN1", "shape": [2, 16], "datatype": "FP32", "data": B.ravel().tolist()},
        ],
        "outputs": [{"name": "SUM"}],
    }
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/ens_nested/infer", json=body)
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["model_name"] == "ens_nested" and answer["id"] == "h1"
        assert [o["name"] for o in answer["outputs"]] == ["SUM"]
        np.testing.assert_array_equal(np.array(answer["outputs"][0]["data"], np.float32).reshape(2, 16), 2 * A + 2 * B)
        meta = (await http.get("/v2/models/ens_nested")).json()
        assert meta["platform"] == "ensemble"
        config = (await http.get("/v2/models/ens_nested/config")).json()
        assert config["ensemble_scheduling"]["step"][0]["model_version"] == -1
        stats = (await http.get("/v2/models/ens_nested/stats")).json()
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 1


async def test_http_step_error_is_prefixed_with_the_ensemble(server: Server, asgi_client) -> None:
    body = {"inputs": [
        {"name": "IN0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "IN1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    ]}
    direct = {"inputs": [dict(body["inputs"][0], name="INPUT0"), dict(body["inputs"][1], name="INPUT1")]}
    async with asgi_client(server) as http:
        step = await http.post("/v2/models/add_sub_any/infer", json=direct)
        reply = await http.post("/v2/models/ens_any/infer", json=body)
    assert reply.status_code == step.status_code, reply.text
    assert reply.json() == {"error": "in ensemble 'ens_any', " + step.json()["error"]}


async def test_nested_ensembles_prefix_each_level(tmp_path: Path) -> None:
    repo = build_ensemble_repository(tmp_path)
    io = [("IN0", "TYPE_FP32", [-1]), ("IN1", "TYPE_FP32", [-1])]
    outer = ensemble_config("ens_outer", io, [("OUT", "TYPE_FP32", [-1])],
                            [("ens_any", {"IN0": "IN0", "IN1": "IN1"}, {"OUT": "OUT"})], max_batch_size=4)
    write_ensemble(repo, "ens_outer", outer)
    bad = [np.ones((1, 3), np.float32), np.ones((1, 4), np.float32)]
    async with Server(ServerOptions(model_repository=[str(repo)])) as engine:
        direct = await asyncio.gather(engine.infer(InferenceRequest(
            "add_sub_any", [Tensor(f"INPUT{i}", "FP32", bad[i]) for i in range(2)])), return_exceptions=True)
        error = direct[0]
        assert isinstance(error, WorkbenchError)
        with pytest.raises(type(error)) as caught:
            await engine.infer(pair("ens_outer", *bad))
    assert str(caught.value) == f"in ensemble 'ens_outer', in ensemble 'ens_any', {error}"


async def test_grpc_infer_through_an_ensemble(server: Server, stub_for) -> None:
    stub = await stub_for(server)
    inputs = [pb.ModelInferRequest.InferInputTensor(name=n, datatype="FP32", shape=[2, 16]) for n in ("IN0", "IN1")]
    request = pb.ModelInferRequest(
        model_name="ens_diamond", inputs=inputs, raw_input_contents=[A.tobytes(), B.tobytes()],
    )
    reply = await stub.ModelInfer(request)
    assert [o.name for o in reply.outputs] == ["OUT0", "OUT1"]
    np.testing.assert_array_equal(np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(2, 16), 2 * A)
    np.testing.assert_array_equal(np.frombuffer(reply.raw_output_contents[1], np.float32).reshape(2, 16), 2 * B)
    meta = await stub.ModelMetadata(pb.ModelMetadataRequest(name="ens_diamond"))
    assert meta.platform == "ensemble"
