"""Helpers of the TensorRT GPU tests (tests/gpu/test_tensorrt_gpu.py): the module skip, a tiny
real ONNX model with dynamic batch and sequence dims, a plan with two optimization profiles
(built with TensorRT's API directly: ``workbench build-plan`` makes one), and a probe that
deserializes damaged plans in a child process (a damaged plan could crash TensorRT, and with it
the test run).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from workbench.gpu.devices import gpu_count


def require_tensorrt() -> None:
    """Skip the calling module unless a GPU is visible and tensorrt and cuda-python import."""
    if gpu_count() == 0:
        pytest.skip("no CUDA GPU visible (the CUDA driver reports 0 devices)", allow_module_level=True)
    for name in ("tensorrt", "cuda.bindings.runtime"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a wheel missing CUDA libraries: skip, say why
            pytest.skip(f"{name} does not import: {exc}", allow_module_level=True)


def scale_onnx(path: Path) -> Path:
    """x FP32 [batch, sequence] -> y = 2x + 1 (same shape), total = sum of x over the sequence
    ([batch]: an output with only a batch dimension)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence"])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch"])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["doubled"]),
        helper.make_node("Add", ["doubled", "one"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0),
    ]
    weights = [
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    graph = helper.make_graph(nodes, "scale", [x], [y, total], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def two_profile_plan(onnx_path: Path, plan_path: Path,
                     profiles: list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]) -> Path:
    """A plan of ``onnx_path`` (input ``x``) with one optimization profile per (min, opt, max)."""
    import tensorrt as trt

    from workbench.config.tensorrt_plan import trt_logger

    logger = trt_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(onnx_path)), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    for low, opt, high in profiles:
        profile = builder.create_optimization_profile()
        profile.set_shape("x", low, opt, high)
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    assert serialized is not None
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    with open(plan_path, "wb") as plan:
        plan.write(serialized)
    return plan_path


_PROBE = """
import json, sys, tensorrt as trt
from pathlib import Path
from workbench.config.tensorrt_plan import deserialize, trt_logger
from workbench.common.errors import ModelLoadError
runtime = trt.Runtime(trt_logger(trt))
reasons = []
for path in sys.argv[1:]:
    try:
        deserialize(trt, runtime, Path(path).read_bytes(), model="probe", path=Path(path), device_id=0)
        reasons.append("")
    except ModelLoadError as exc:
        reasons.append(exc.message)
print(json.dumps(reasons))
"""


def probe_plans(paths: list[Path]) -> list[str] | None:
    """Deserialize each plan in a child process: the reason each fails ("" if it loads), or
    None when the child crashed (TensorRT does not survive every damaged header)."""
    result = subprocess.run([sys.executable, "-c", _PROBE, *map(str, paths)], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])
