"""Memory footprint per model version: host RSS growth while each instance loads, in
statistics' ``memory_usage`` (Triton's ``MemoryUsage``: type, id, byte_size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench import Server, ServerOptions
from workbench.statistics import MemoryUsage, host_rss_bytes, sum_memory
from workbench.testing.models import write_model

BIG = 48 * 2**20  # bytes of float32 initializer in the big model


def _const_add_graph(n: int) -> helper.GraphProto:
    """X [n] FP32 -> Y = X + W, W an initializer of n float32 (random: not compressible)."""
    weights = np.random.default_rng(0).random(n, dtype=np.float32)
    return helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])], "const_add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(weights, "W")],
    )


def _config(name: str, n: int) -> str:
    return (f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
            f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {n} ] }} ]\n'
            f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {n} ] }} ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n")


def test_sum_memory_and_rss() -> None:
    assert sum_memory([MemoryUsage("CPU", 0, 5), MemoryUsage("GPU", 1, 7),
                       MemoryUsage("CPU", 0, 6)]) == [MemoryUsage("CPU", 0, 11),
                                                      MemoryUsage("GPU", 1, 7)]
    assert MemoryUsage("GPU", 1, 7).as_dict() == {"type": "GPU", "id": 1, "byte_size": 7}
    rss = host_rss_bytes()
    assert rss is None or rss > 10 * 2**20


@pytest.mark.skipif(host_rss_bytes() is None, reason="no /proc/self/statm here")
async def test_big_initializer_reports_more_than_tiny(tmp_path: Path) -> None:
    write_model(tmp_path, "tiny", _config("tiny", 4), _const_add_graph(4))
    write_model(tmp_path, "big", _config("big", BIG // 4), _const_add_graph(BIG // 4))
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["tiny", "big"], model_load_thread_count=1)
    async with Server(options) as server:
        stats = {s["name"]: s for s in (await server.statistics())["model_stats"]}
    memory = {name: s["memory_usage"] for name, s in stats.items()}
    for name in ("tiny", "big"):
        (entry,) = memory[name]
        assert entry["type"] == "CPU" and entry["id"] == 0
    big, tiny = memory["big"][0]["byte_size"], memory["tiny"][0]["byte_size"]
    assert big >= BIG // 2, memory  # the weights are resident (ORT may share the file's pages)
    assert big > tiny + BIG // 2, memory
