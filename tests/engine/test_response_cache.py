"""Response cache on real models: hits, misses, LRU bound (entries sized as Triton's local
cache sizes them), invalidation on reload."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.common.results import ModelStats
from workbench.engine.inference.response_cache import entry_size
from workbench.testing.ensembles import ensemble_config, write_ensemble
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
    # one response = 2 outputs x 16 floats: 242 bytes with Triton's entry overhead; room for two
    options = ServerOptions(model_repository=[str(repository(tmp_path))], response_cache_byte_size=500)
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


def test_entry_size_counts_triton_overhead() -> None:
    """Triton core's cache entry: 4 + per output (28 + name + datatype + 8 x dims + data)."""
    floats = np.zeros((1, 16), np.float32)
    assert entry_size({"OUTPUT0": floats, "OUTPUT1": floats}) == 4 + 2 * (28 + 7 + 4 + 16 + 64)
    words = np.array([b"ab", b"c"], dtype=np.object_)
    assert entry_size({"OUT": words}) == 4 + 28 + 3 + 5 + 8 + (4 + 2 + 4 + 1)


async def test_small_cache_does_not_hold_an_ensemble_response(tmp_path: Path, caplog) -> None:
    """L0_response_cache's insertion failure: a 200-byte cache holds the tensor bytes (128)
    of the ensemble's response but not the entry Triton stores (242): two misses, no hit,
    and Triton's log line."""
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    pair = [("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16])]
    config = ensemble_config("ens", pair, [("OUTPUT0", "TYPE_FP32", [16]), ("OUTPUT1", "TYPE_FP32", [16])],
                             [("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
                               {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})])
    write_ensemble(tmp_path, "ens", config + "response_cache { enable: true }\n")
    options = ServerOptions(model_repository=[str(tmp_path)], response_cache_byte_size=200)
    async with Server(options) as server:
        for _ in range(2):
            ens = request(1.0)
            ens.model_name = "ens"
            await server.infer(ens)
        stats = (await server.statistics("ens"))["model_stats"][0]["inference_stats"]
        assert stats["cache_miss"]["count"] == 2 and stats["cache_hit"]["count"] == 0
    assert "Failed to insert key [" in caplog.text
    assert "Requested byte_size: 242 is greater than total cache size: 200" in caplog.text
