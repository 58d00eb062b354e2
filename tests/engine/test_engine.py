"""The engine's public API on real models: lifecycle, versions, statistics, concurrency."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from workbench import (
    InferenceRequest,
    InvalidArgument,
    ModelLoadError,
    ModelNotFound,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
    Unavailable,
)


def add_sub_request(a: np.ndarray, b: np.ndarray, **kwargs) -> InferenceRequest:
    return InferenceRequest(
        "add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)], **kwargs
    )


async def test_infer_add_sub(server: Server) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    response = await server.infer(add_sub_request(a, b, id="abc"))
    assert response.model_name == "add_sub" and response.model_version == "1"
    assert response.id == "abc"
    outputs = {t.name: t.data for t in response.outputs}
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


async def test_requested_output_subset_and_order(server: Server) -> None:
    a = np.zeros((1, 16), np.float32)
    request = add_sub_request(a, a + 2, outputs=[RequestedOutput("OUTPUT1")])
    response = await server.infer(request)
    assert [t.name for t in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(response.outputs[0].data, a - 2)


async def test_zero_size_batch_is_valid(server: Server) -> None:
    empty = np.zeros((0, 16), np.float32)
    response = await server.infer(add_sub_request(empty, empty))
    assert response.outputs[0].data.shape == (0, 16)


async def test_version_policy_all_and_explicit_versions(server: Server) -> None:
    a = np.ones((1, 16), np.float32)
    for version in ("1", "2", "3"):
        request = InferenceRequest(
            "versioned", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)],
            model_version=version,
        )
        assert (await server.infer(request)).model_version == version
    latest = InferenceRequest("versioned", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])
    assert (await server.infer(latest)).model_version == "3"
    assert (await server.model_metadata("versioned"))["versions"] == ["1", "2", "3"]


async def test_unknown_model_and_version_errors(server: Server) -> None:
    a = np.ones((1, 16), np.float32)
    with pytest.raises(ModelNotFound, match=r"^Request for unknown model: 'nope' is not found$"):
        await server.infer(InferenceRequest("nope", []))
    with pytest.raises(ModelNotFound, match=r"'add_sub' version 7 is not found"):
        await server.infer(add_sub_request(a, a, model_version="7"))


async def test_model_config_is_normalized(server: Server) -> None:
    config = await server.model_config("identity_fp32")
    assert config.backend == "onnxruntime" and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 4  # auto-completed from the graph
    assert [i.name for i in config.input] == ["INPUT0"]
    assert config.instance_group[0].name == "identity_fp32"
    assert config.instance_group[0].count == 2  # Triton: KIND_CPU onnxruntime default


async def test_statistics_count_success_failure_and_batches(server: Server) -> None:
    a = np.ones((3, 16), np.float32)
    for _ in range(4):
        await server.infer(add_sub_request(a, a))
    with pytest.raises(InvalidArgument):
        await server.infer(add_sub_request(a, a[:, :8]))
    stats = (await server.statistics("add_sub"))["model_stats"]
    assert len(stats) == 1
    entry = stats[0]
    assert entry["name"] == "add_sub" and entry["version"] == "1"
    inference = entry["inference_stats"]
    assert set(inference) == {
        "success", "fail", "queue", "compute_input", "compute_infer",
        "compute_output", "cache_hit", "cache_miss",
    }
    assert inference["success"]["count"] == 4 and inference["fail"]["count"] == 1
    assert inference["queue"]["count"] == 4 and inference["compute_infer"]["ns"] > 0
    assert entry["inference_count"] == 12 and entry["execution_count"] == 4
    assert entry["batch_stats"][0]["batch_size"] == 3
    assert entry["batch_stats"][0]["compute_infer"]["count"] == 4
    assert entry["last_inference"] > 1_600_000_000_000  # milliseconds since the epoch


async def test_statistics_errors(server: Server) -> None:
    with pytest.raises(InvalidArgument, match="requested model 'nope' is not available"):
        await server.statistics("nope")
    with pytest.raises(InvalidArgument, match="requested model version is not available"):
        await server.statistics("add_sub", "9")
    everything = await server.statistics()
    assert {s["name"] for s in everything["model_stats"]} >= {"add_sub", "versioned"}


async def test_concurrent_requests_all_correct(server: Server) -> None:
    rng = np.random.default_rng(0)
    pairs = [rng.random((1 + i % 4, 16), dtype=np.float32) for i in range(200)]
    results = await asyncio.gather(*(server.infer(add_sub_request(p, p * 2)) for p in pairs))
    for pair, response in zip(pairs, results, strict=True):
        np.testing.assert_allclose(response.outputs[0].data, pair * 3, rtol=1e-6)


async def test_broken_models_unavailable_others_serve(mixed_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(mixed_repository)], exit_on_error=False)
    async with Server(options) as server:
        index = {(r["name"], r.get("version")): r for r in await server.repository_index()}
        assert index[("add_sub", "1")]["state"] == "READY"
        syntax = index[("broken_syntax", None)]
        assert syntax["state"] == "UNAVAILABLE"
        assert "config.pbtxt' at line 3, column" in syntax["reason"]
        assert "INVALID_PROTOBUF" in index[("broken_onnx", "1")]["reason"]
        assert "configuration expects datatype TYPE_INT32 for input 'INPUT0'" in (
            index[("wrong_dtype", "1")]["reason"]
        )
        assert (
            "model 'wrong_dims', tensor 'INPUT1': the model expects 2 dimensions (shape [-1,16]) but "
            "the model configuration specifies 2 dimensions (an initial batch dimension because "
            "max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,15])"
        ) in index[("wrong_dims", "1")]["reason"]
        assert not server.is_ready()  # strict readiness
        a = np.ones((1, 16), np.float32)
        assert (await server.infer(add_sub_request(a, a))).outputs[0].data[0, 0] == 2
        with pytest.raises(ModelNotFound, match="'wrong_dtype' has no available versions"):
            await server.infer(InferenceRequest("wrong_dtype", []))


async def test_exit_on_error_refuses_to_start(mixed_repository: Path) -> None:
    server = Server(ServerOptions(model_repository=[str(mixed_repository)]))
    with pytest.raises(ModelLoadError, match="broken_syntax"):
        await server.start()
    assert not server.is_live()


async def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    server = Server(ServerOptions(model_repository=[str(tmp_path / "absent")]))
    with pytest.raises(InvalidArgument, match="does not exist"):
        await server.start()


async def test_explicit_mode_load_unload(test_repository: Path) -> None:
    options = ServerOptions(
        model_repository=[str(test_repository)], model_control_mode="explicit",
        load_model=["fixed_shape"],
    )
    async with Server(options) as server:
        index = {r["name"]: r for r in await server.repository_index()}
        assert index["fixed_shape"]["state"] == "READY"
        assert index["add_sub"] == {"name": "add_sub"}  # never loaded
        await server.load_model("add_sub")
        assert await server.model_ready("add_sub")
        await server.unload_model("add_sub")
        assert not await server.model_ready("add_sub")
        rows = [r for r in await server.repository_index() if r["name"] == "add_sub"]
        assert rows == [{"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
        ready_only = await server.repository_index(ready=True)
        assert [r["name"] for r in ready_only] == ["fixed_shape"]
        with pytest.raises(InvalidArgument, match="failed to poll from model repository"):
            await server.load_model("not_there")


async def test_load_with_config_override_and_reload(test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], model_control_mode="explicit")
    async with Server(options) as server:
        await server.load_model("add_sub")
        first = await server.model_config("add_sub")
        assert first.max_batch_size == 8
        override = (
            '{"name": "add_sub", "backend": "onnxruntime", "max_batch_size": 2, '
            '"instance_group": [{"count": 1, "kind": "KIND_CPU"}]}'
        )
        await server.load_model("add_sub", override)
        config = await server.model_config("add_sub")
        assert config.max_batch_size == 2 and config.instance_group[0].count == 1
        a = np.ones((3, 16), np.float32)
        with pytest.raises(InvalidArgument, match="batch-size must be <= 2 for 'add_sub'"):
            await server.infer(add_sub_request(a, a))


async def test_reload_under_load_drops_nothing(test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], model_control_mode="explicit",
                            load_model=["add_sub"])
    async with Server(options) as server:
        a = np.ones((1, 16), np.float32)
        stop = asyncio.Event()

        async def traffic() -> int:
            done = 0
            while not stop.is_set():
                await server.infer(add_sub_request(a, a))
                done += 1
            return done

        workers = [asyncio.create_task(traffic()) for _ in range(8)]
        for _ in range(3):
            await server.load_model("add_sub")
        stop.set()
        counts = await asyncio.gather(*workers)  # any failed request would raise here
        assert sum(counts) > 0


async def test_load_unload_refused_in_none_mode(server: Server) -> None:
    with pytest.raises(Unavailable, match="explicit model load / unload is not allowed"):
        await server.load_model("add_sub")
    with pytest.raises(Unavailable):
        await server.unload_model("add_sub")


async def test_stop_drains_in_flight_requests(test_repository: Path) -> None:
    server = Server(ServerOptions(model_repository=[str(test_repository)]))
    await server.start()
    a = np.ones((1, 16), np.float32)
    pending = [asyncio.create_task(server.infer(add_sub_request(a, a))) for _ in range(50)]
    await asyncio.sleep(0)
    await server.stop()
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(not isinstance(r, Exception) for r in results)
    assert not server.is_ready()


async def test_kind_gpu_without_gpu_fails_with_clear_reason(tmp_path: Path) -> None:
    from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

    config = ADD_SUB_CONFIG.replace("KIND_CPU", "KIND_GPU")
    write_model(tmp_path, "add_sub", config, add_sub_graph())
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        assert "is KIND_GPU but no GPU is usable here" in row["reason"]
