"""Auto-complete from model files and ONNX graphs (TRITON_COMPAT §3)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig
from workbench.config import (
    autocomplete_model_config,
    model_config_to_json,
    normalize_model_config,
    parse_model_config,
    read_model_config,
    validate_model_config,
)


def _io(config: mc.ModelConfig, what: str) -> list[dict[str, Any]]:
    """Inputs or outputs as comparable dicts."""
    return [
        {
            "name": io.name,
            "data_type": mc.DataType.Name(io.data_type),
            "dims": list(io.dims),
            **({"reshape": list(io.reshape.shape)} if io.HasField("reshape") else {}),
        }
        for io in getattr(config, what)
    ]


# ---------------------------------------------------------------- missing config + ONNX graph


def test_missing_config_batchable_onnx(
    write_model: Any, graphs: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    caplog.set_level(logging.WARNING)
    config = autocomplete_model_config(None, "dense", model_dir)
    assert config.name == "dense"
    assert (config.backend, config.platform, config.default_model_filename) == (
        "onnxruntime",
        "onnxruntime_onnx",
        "model.onnx",
    )
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert _io(config, "input") == [  # initializer "unused_weight" is not an input
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_INT64", "dims": [-1]},
    ]
    assert _io(config, "output") == [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_INT64", "dims": [-1]},
    ]
    assert any(
        r.levelno == logging.WARNING
        and "autofilled max_batch_size to 4 for model 'dense'" in r.getMessage()
        for r in caplog.records
    )
    final = normalize_model_config(config)
    validate_model_config(final, "dense")
    data = model_config_to_json(final)
    assert data["dynamic_batching"]["preferred_batch_size"] == [4]
    assert data["input"][0]["dims"] == [4]


def test_missing_config_fixed_shape_onnx(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("fixed", files={"1/model.onnx": graphs.fixed})
    config = autocomplete_model_config(None, "fixed", model_dir)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _io(config, "input") == [{"name": "X", "data_type": "TYPE_FP32", "dims": [2, 3]}]
    assert _io(config, "output") == [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2, 3]}]
    validate_model_config(normalize_model_config(config), "fixed")


def test_fixed_shape_onnx_with_max_batch_size_fails(
    write_model: Any, graphs: SimpleNamespace
) -> None:
    model_dir = write_model("fixed", files={"1/model.onnx": graphs.fixed})
    config = parse_model_config('max_batch_size: 8 backend: "onnxruntime"')
    with pytest.raises(InvalidModelConfig) as info:
        autocomplete_model_config(config, "fixed", model_dir)
    assert str(info.value) == (
        "autofill failed for model 'fixed': model does not support batching while non-zero "
        "max_batch_size is specified"
    )


def test_string_tensors(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("text", files={"1/model.onnx": graphs.string})
    config = autocomplete_model_config(None, "text", model_dir)
    assert config.max_batch_size == 4
    assert _io(config, "input") == [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]
    assert _io(config, "output") == [{"name": "TEXT_OUT", "data_type": "TYPE_STRING", "dims": [1]}]


def test_scalar_tensors_get_dims_one_without_reshape(
    write_model: Any, graphs: SimpleNamespace
) -> None:
    model_dir = write_model("scalar", files={"1/model.onnx": graphs.scalar})
    config = autocomplete_model_config(None, "scalar", model_dir)
    assert config.max_batch_size == 0  # a scalar has no batch dim
    assert _io(config, "input") == [{"name": "S", "data_type": "TYPE_FP32", "dims": [1]}]
    assert _io(config, "output") == [{"name": "S_OUT", "data_type": "TYPE_FP32", "dims": [1]}]
    validate_model_config(normalize_model_config(config), "scalar")


def test_batch_only_tensors_get_dims_one_and_empty_reshape(
    write_model: Any, graphs: SimpleNamespace
) -> None:
    model_dir = write_model("vec", files={"1/model.onnx": graphs.batch_only})
    config = autocomplete_model_config(None, "vec", model_dir)
    assert config.max_batch_size == 4
    assert _io(config, "input") == [
        {"name": "B", "data_type": "TYPE_FP32", "dims": [1], "reshape": []}
    ]
    assert _io(config, "output") == [
        {"name": "B_OUT", "data_type": "TYPE_FP32", "dims": [1], "reshape": []}
    ]
    validate_model_config(normalize_model_config(config), "vec")


def test_unknown_rank_and_unknown_dims(write_model: Any, graphs: SimpleNamespace) -> None:
    model = graphs.build(
        [("U", TensorProto.FLOAT, None), ("D", TensorProto.DOUBLE, [None, 3])],
        [("U_OUT", TensorProto.FLOAT, None), ("D_OUT", TensorProto.DOUBLE, [None, 3])],
    )
    model_dir = write_model("unk", files={"1/model.onnx": model})
    config = autocomplete_model_config(None, "unk", model_dir)
    assert config.max_batch_size == 0  # unknown rank: cannot batch
    assert _io(config, "input") == [
        {"name": "U", "data_type": "TYPE_FP32", "dims": [1]},
        {"name": "D", "data_type": "TYPE_FP64", "dims": [-1, 3]},
    ]


@pytest.mark.parametrize(
    ("default_max_batch_size", "max_batch_size", "dynamic"),
    [(16, 16, True), (1, 1, False), (0, 0, False)],
)
def test_default_max_batch_size(
    write_model: Any,
    graphs: SimpleNamespace,
    default_max_batch_size: int,
    max_batch_size: int,
    dynamic: bool,
) -> None:
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    config = autocomplete_model_config(None, "dense", model_dir, default_max_batch_size=default_max_batch_size)
    assert config.max_batch_size == max_batch_size
    assert config.HasField("dynamic_batching") is dynamic
    expected = [4] if max_batch_size else [-1, 4]
    assert list(config.input[0].dims) == expected


def test_existing_scheduler_is_kept(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    config = autocomplete_model_config(
        parse_model_config("max_batch_size: 8 sequence_batching {}"), "dense", model_dir
    )
    assert config.max_batch_size == 8
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"


# ---------------------------------------------------------------- partial configs


def test_partial_config_fills_missing_outputs_keeps_inputs(
    write_model: Any, graphs: SimpleNamespace
) -> None:
    text = """
    name: "dense"
    backend: "onnxruntime"
    max_batch_size: 2
    input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
    """
    model_dir = write_model("dense", config=text, files={"1/model.onnx": graphs.batchable})
    original = read_model_config(model_dir)
    assert original is not None
    snapshot = original.SerializeToString()
    config = autocomplete_model_config(original, "dense", model_dir)
    assert original.SerializeToString() == snapshot  # never mutated
    assert config.max_batch_size == 2
    assert config.HasField("dynamic_batching")
    assert _io(config, "input") == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]


def test_listed_entries_missing_type_or_dims_are_completed(
    write_model: Any, graphs: SimpleNamespace
) -> None:
    text = """
    max_batch_size: 4
    input [ { name: "INPUT0" }, { name: "INPUT1", data_type: TYPE_INT32 } ]
    output [ { name: "OUTPUT0", dims: [ 4 ] }, { name: "OUTPUT1", data_type: TYPE_INT64, dims: [ 7 ] } ]
    """
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    config = autocomplete_model_config(parse_model_config(text), "dense", model_dir)
    assert _io(config, "input") == [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [-1]},  # listed type kept
    ]
    assert _io(config, "output") == [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_INT64", "dims": [7]},  # complete entries kept as is
    ]
    assert not config.HasField("dynamic_batching")  # both lists given: no batching autofill


def test_complete_config_skips_graph(write_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    text = """
    name: "m"
    platform: "onnxruntime_onnx"
    input [ { name: "a", data_type: TYPE_FP32, dims: [ 1 ] } ]
    output [ { name: "b", data_type: TYPE_FP32, dims: [ 1 ] } ]
    """
    model_dir = write_model("m", files={"1/model.onnx": b"not an onnx file"})
    caplog.set_level(logging.DEBUG)
    config = autocomplete_model_config(parse_model_config(text), "m", model_dir)
    assert config.backend == "onnxruntime" and config.max_batch_size == 0
    assert "skipping model configuration auto-complete for 'm'" in caplog.text


# ---------------------------------------------------------------- model files and versions


def test_model_onnx_folder(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("big", files={"1/model.onnx/model.onnx": graphs.fixed})
    config = autocomplete_model_config(None, "big", model_dir)
    assert config.backend == "onnxruntime"
    assert [i.name for i in config.input] == ["X"]


def test_unreadable_onnx(write_model: Any) -> None:
    model_dir = write_model("bad", files={"1/model.onnx": b"\x00garbage"})
    with pytest.raises(
        InvalidModelConfig,
        match=r"^autofill failed for model 'bad': unable to load ONNX model '.*model\.onnx'",
    ):
        autocomplete_model_config(None, "bad", model_dir)


def test_versions_without_model_file(write_model: Any) -> None:
    model_dir = write_model("m", config='backend: "onnxruntime"', files={"1/other.txt": "x"})
    with pytest.raises(
        InvalidModelConfig, match=r"unable to find 'model\.onnx' in any version directory"
    ):
        autocomplete_model_config(read_model_config(model_dir), "m", model_dir)


def test_no_version_dirs_skips_graph(write_model: Any) -> None:
    model_dir = write_model("m", config='backend: "onnxruntime"')
    config = autocomplete_model_config(read_model_config(model_dir), "m", model_dir)
    assert config.platform == "onnxruntime_onnx" and len(config.input) == 0


def test_graph_of_newest_served_version(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model(
        "m", files={"1/model.onnx": graphs.fixed, "2/model.onnx": graphs.string}
    )
    assert autocomplete_model_config(None, "m", model_dir).input[0].name == "TEXT"
    pinned = parse_model_config("version_policy { specific { versions: [1] } }")
    assert autocomplete_model_config(pinned, "m", model_dir).input[0].name == "X"


def test_unsupported_onnx_type(write_model: Any, graphs: SimpleNamespace) -> None:
    model = graphs.build(
        [("C", TensorProto.COMPLEX64, [2])], [("C_OUT", TensorProto.COMPLEX64, [2])]
    )
    model_dir = write_model("c", files={"1/model.onnx": model})
    with pytest.raises(
        InvalidModelConfig, match="unsupported ONNX data type COMPLEX64 for input 'C'"
    ):
        autocomplete_model_config(None, "c", model_dir)


# ---------------------------------------------------------------- backend fields


@pytest.mark.parametrize(
    ("files", "backend", "platform", "filename"),
    [
        ({"1/model.py": "class TritonPythonModel: ..."}, "python", "", "model.py"),
        ({"1/model.pt": b"pt"}, "pytorch", "pytorch_libtorch", "model.pt"),
        ({"1/model.pt2": b"pt2"}, "pytorch", "torch_aoti", "model.pt2"),
        ({"1/model.plan": b"plan"}, "tensorrt", "tensorrt_plan", "model.plan"),
        ({"1/model.xml": "<xml/>", "1/model.bin": b""}, "openvino", "", "model.xml"),
        # a model.savedmodel folder: tests/backends/test_tensorflow_backend.py (its auto-complete reads it)
        ({"1/model.graphdef": b""}, "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        (
            {"1/model.py": "", "2/model.plan": b""},
            "python",
            "",
            "model.py",
        ),  # lowest version decides
        (
            {"1/model.plan": b"", "1/model.py": ""},
            "tensorrt",
            "tensorrt_plan",
            "model.plan",
        ),  # Triton's order
    ],
)
def test_backend_from_model_files(
    write_model: Any, files: dict[str, object], backend: str, platform: str, filename: str
) -> None:
    model_dir = write_model("m", files=files)
    config = autocomplete_model_config(None, "m", model_dir)
    assert (config.backend, config.platform, config.default_model_filename) == (
        backend,
        platform,
        filename,
    )


@pytest.mark.parametrize(
    ("text", "backend", "platform", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ('backend: "onnxruntime"', "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ('platform: "pytorch_libtorch"', "pytorch", "pytorch_libtorch", "model.pt"),
        ('backend: "pytorch"', "pytorch", "pytorch_libtorch", "model.pt"),
        ('backend: "pytorch" platform: "torch_aoti"', "pytorch", "torch_aoti", "model.pt2"),
        ('platform: "tensorrt_plan"', "tensorrt", "tensorrt_plan", "model.plan"),
        ('backend: "tensorrt"', "tensorrt", "tensorrt_plan", "model.plan"),
        ('default_model_filename: "model.plan"', "tensorrt", "tensorrt_plan", "model.plan"),
        ('backend: "python"', "python", "", "model.py"),
        ('backend: "python" default_model_filename: "main.py"', "python", "", "main.py"),
        (
            'backend: "onnxruntime" default_model_filename: "net.onnx"',
            "onnxruntime",
            "onnxruntime_onnx",
            "net.onnx",
        ),
        ('backend: "identity"', "identity", "", ""),
        ('platform: "ensemble"', "", "ensemble", ""),
        ('platform: "custom_platform"', "", "custom_platform", ""),
    ],
)
def test_backend_fields_from_each_other(
    write_model: Any, text: str, backend: str, platform: str, filename: str
) -> None:
    model_dir = write_model("m", files={"1/model.py": ""})  # declared fields win over files
    config = autocomplete_model_config(parse_model_config(text), "m", model_dir, strict=True)
    assert (config.backend, config.platform, config.default_model_filename) == (
        backend,
        platform,
        filename,
    )


def test_custom_backend_from_directory_name(write_model: Any) -> None:
    model_dir = write_model("adder.identity", files={"1/README": "x"})
    config = autocomplete_model_config(None, "adder.identity", model_dir)
    assert (config.backend, config.default_model_filename) == ("identity", "model.identity")


def test_no_backend_determinable(write_model: Any) -> None:
    model_dir = write_model("mystery", files={"1/weights.bin": b""})
    with pytest.raises(InvalidModelConfig) as info:
        autocomplete_model_config(None, "mystery", model_dir)
    assert str(info.value) == (
        "Invalid model name: Could not determine backend for model 'mystery' with no backend in "
        "model configuration. Expected model name of the form 'model.<backend_name>'."
    )


# ---------------------------------------------------------------- strict mode


def test_strict_requires_config(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    with pytest.raises(
        InvalidModelConfig, match="model configuration file is missing for model 'dense'"
    ):
        autocomplete_model_config(None, "dense", model_dir, strict=True)


def test_strict_infers_nothing_from_graph(write_model: Any, graphs: SimpleNamespace) -> None:
    model_dir = write_model("dense", files={"1/model.onnx": graphs.batchable})
    given = parse_model_config('input [ { name: "INPUT0" } ]')
    config = autocomplete_model_config(given, "dense", model_dir, strict=True)
    assert config.name == "dense"
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _io(config, "input") == [{"name": "INPUT0", "data_type": "TYPE_INVALID", "dims": []}]
    assert len(config.output) == 0
    # Triton fills the backend fields from the files even in strict mode
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")
    with pytest.raises(
        InvalidModelConfig, match="model input 'INPUT0' must specify 'data_type' for dense"
    ):
        validate_model_config(normalize_model_config(config), "dense")


def test_name_kept_when_given(write_model: Any) -> None:
    model_dir = write_model("m", files={"1/model.py": ""})
    config = autocomplete_model_config(
        parse_model_config('name: "other"'), "m", model_dir, strict=True
    )
    assert config.name == "other"
    assert (
        autocomplete_model_config(mc.ModelConfig(), "m", Path(model_dir), strict=True).name == "m"
    )
