"""Fixtures for the config-layer tests: tiny real ONNX graphs and model folders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

Dim = int | str | None
TensorSpec = tuple[str, int, Sequence[Dim] | None]


def build_onnx(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    *,
    with_initializer_input: bool = False,
) -> onnx.ModelProto:
    """A valid ONNX model whose outputs are ``Identity`` of the inputs, pairwise.

    Each spec is ``(name, TensorProto type, shape)``; a shape entry that is a
    str is a symbolic dim, None an unknown dim; shape None = unknown rank.
    ``with_initializer_input`` adds an initializer that is also listed as a
    graph input (old-IR style), which auto-complete must not report.
    """
    nodes = [
        helper.make_node("Identity", [src[0]], [dst[0]])
        for src, dst in zip(inputs, outputs, strict=True)
    ]
    graph_inputs = [helper.make_tensor_value_info(*spec) for spec in inputs]
    initializers = []
    if with_initializer_input:
        weight = numpy_helper.from_array(np.zeros((4,), dtype=np.float32), name="unused_weight")
        initializers.append(weight)
        graph_inputs.append(helper.make_tensor_value_info("unused_weight", TensorProto.FLOAT, [4]))
    graph = helper.make_graph(
        nodes,
        "g",
        graph_inputs,
        [helper.make_tensor_value_info(*spec) for spec in outputs],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if all(spec[2] is not None for spec in (*inputs, *outputs)):
        onnx.checker.check_model(model)  # the checker rejects unknown-rank graph inputs
    return model


def batchable_onnx() -> onnx.ModelProto:
    """INPUT0/INPUT1 FP32 [batch, 4] -> OUTPUT0/OUTPUT1 (symbolic first dim)."""
    return build_onnx(
        [
            ("INPUT0", TensorProto.FLOAT, ["batch", 4]),
            ("INPUT1", TensorProto.INT64, ["batch", None]),
        ],
        [
            ("OUTPUT0", TensorProto.FLOAT, ["batch", 4]),
            ("OUTPUT1", TensorProto.INT64, ["batch", None]),
        ],
        with_initializer_input=True,
    )


def fixed_onnx() -> onnx.ModelProto:
    """X FP32 [2, 3] -> Y FP32 [2, 3]: no batch dimension."""
    return build_onnx(
        [("X", TensorProto.FLOAT, [2, 3])],
        [("Y", TensorProto.FLOAT, [2, 3])],
    )


def string_onnx() -> onnx.ModelProto:
    """TEXT STRING [n, 1] -> TEXT_OUT STRING [n, 1]."""
    return build_onnx(
        [("TEXT", TensorProto.STRING, ["n", 1])],
        [("TEXT_OUT", TensorProto.STRING, ["n", 1])],
    )


def scalar_onnx() -> onnx.ModelProto:
    """S FP32 [] (a dim-less scalar) -> S_OUT FP32 []."""
    return build_onnx(
        [("S", TensorProto.FLOAT, [])],
        [("S_OUT", TensorProto.FLOAT, [])],
    )


def batch_only_onnx() -> onnx.ModelProto:
    """B FP32 [batch] -> B_OUT FP32 [batch]: batchable, nothing left after the batch dim."""
    return build_onnx(
        [("B", TensorProto.FLOAT, ["batch"])],
        [("B_OUT", TensorProto.FLOAT, ["batch"])],
    )


ModelWriter = Callable[..., Path]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty model repository folder."""
    path = tmp_path / "models"
    path.mkdir()
    return path


@pytest.fixture
def write_model(repo: Path) -> ModelWriter:
    """Write ``<repo>/<name>/`` with an optional config.pbtxt and version files.

    ``files`` maps a relative path to an ``onnx.ModelProto``, bytes or str.
    """

    def write(name: str, config: str | None = None, files: dict[str, object] | None = None) -> Path:
        model_dir = repo / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
        for rel, content in (files or {}).items():
            path = model_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, onnx.ModelProto):
                onnx.save(content, str(path))
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(str(content), encoding="utf-8")
        return model_dir

    return write


@pytest.fixture
def graphs() -> SimpleNamespace:
    """The tiny ONNX graphs above, built fresh for each test."""
    return SimpleNamespace(
        build=build_onnx,
        batchable=batchable_onnx(),
        fixed=fixed_onnx(),
        string=string_onnx(),
        scalar=scalar_onnx(),
        batch_only=batch_only_onnx(),
    )
