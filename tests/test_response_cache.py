"""Response cache on real models: hits, misses, LRU bound, invalidation on reload."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.results import ModelStats
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

CACHED = ADD_SUB_CONFIG + "response_cache { enable: true }\n"


def repository(tmp_path: Path, config: str = CACHED) -> Path:
    write_model(tmp_path, "add_sub", config, add_sub_graph())
    return tmp_path


def request(value: float, shape=(1, 16), outputs=None) -> InferenceRequest:
    a = np.full(shape, value, np.float32)
    req = InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])
    if outputs:
        from workbench import RequestedOutput

        req.outputs = [RequestedOutput(n) for n in outputs]
    return req


async def inference_stats(server: Server) -> ModelStats:
    return (await server.statistics("add_sub"))["model_stats"][0]


async def test_identical_requests_hit(tmp_path: Path) -> None:
    options = ServerOptions(model_repository=[str(repository(tmp_path))], response_cache_byte_size=1 << 20)
    async with Server(options) as server:
        first = await server.infer(request(1.0))
        second = await server.infer(request(1.0))
        np.testing.assert_array_equal(first.outputs[0].data, second.outputs[0].data)
        await server.infer(request(2.0))  # other bytes
        await server.infer(request(1.0, shape=(2, 16)))  # other shape
        await server.infer(request(1.0, outputs=["OUTPUT1"]))  # other requested outputs
        stats = await inference_stats(server)
        assert stats["inference_stats"]["cache_hit"]["count"] == 1
        assert stats["inference_stats"]["cache_miss"]["count"] == 4
        assert stats["inference_stats"]["success"]["count"] == 5
        assert stats["execution_count"] == 4 and stats["inference_count"] == 5  # hits don't execute


async def test_lru_stays_within_its_byte_budget(tmp_path: Path) -> None:
    # one response = 2 outputs x 16 floats = 128 bytes; room for two
    options = ServerOptions(model_repository=[str(repository(tmp_path))], response_cache_byte_size=300)
    async with Server(options) as server:
        for value in (1.0, 2.0, 3.0):
            await server.infer(request(value))
        await server.infer(request(3.0))  # still cached
        await server.infer(request(1.0))  # evicted as least recently used
        stats = (await inference_stats(server))["inference_stats"]
        assert stats["cache_hit"]["count"] == 1 and stats["cache_miss"]["count"] == 4


async def test_reload_never_serves_stale_results(tmp_path: Path) -> None:
    options = ServerOptions(model_repository=[str(repository(tmp_path))], response_cache_byte_size=1 << 20,
                            model_control_mode="explicit", load_model=["add_sub"])
    async with Server(options) as server:
        before = await server.infer(request(1.0))
        np.testing.assert_array_equal(before.outputs[0].data, np.full((1, 16), 2.0, np.float32))
        # the model's file changes (add becomes sub) and the model is reloaded
        write_model(tmp_path, "add_sub", CACHED, _sub_add_graph())
        await server.load_model("add_sub")
        after = await server.infer(request(1.0))
        np.testing.assert_array_equal(after.outputs[0].data, np.zeros((1, 16), np.float32))
        assert (await inference_stats(server))["inference_stats"]["cache_hit"]["count"] == 0


def _sub_add_graph():
    graph = add_sub_graph()
    graph.node[0].op_type, graph.node[1].op_type = "Sub", "Add"
    return graph


async def test_models_without_enable_are_not_cached(tmp_path: Path) -> None:
    options = ServerOptions(model_repository=[str(repository(tmp_path, ADD_SUB_CONFIG))],
                            response_cache_byte_size=1 << 20)
    async with Server(options) as server:
        await server.infer(request(1.0))
        await server.infer(request(1.0))
        stats = await inference_stats(server)
        assert stats["execution_count"] == 2
        assert stats["inference_stats"]["cache_miss"]["count"] == 0
