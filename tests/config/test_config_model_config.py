"""config.pbtxt text and JSON <-> ModelConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidArgument, InvalidModelConfig, StatusCode
from workbench.config import (
    model_config_from_json,
    model_config_to_json,
    model_config_to_text,
    parse_model_config,
    read_model_config,
)

SIMPLE = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { specific: { versions: [1, 3] } }
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_STRING
    dims: [ -1, 2 ]
    reshape: { shape: [ -1, 1, 2 ] }
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
    label_filename: "labels.txt"
  }
]
instance_group [ { kind: KIND_CPU, count: 2 } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy {
    key: 2
    value: { timeout_action: DELAY, default_timeout_microseconds: 5000000, max_queue_size: 3 }
  }
}
parameters { key: "k" value { string_value: "v" } }
model_warmup [
  {
    name: "w"
    batch_size: 1
    inputs { key: "INPUT0" value { data_type: TYPE_INT32, dims: [ 16 ], zero_data: true } }
  }
]
"""

ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "a", model_version: -1, input_map { key: "x" value: "IN" }, output_map { key: "y" value: "OUT" } }
  ]
}
"""

SEQUENCE = """
name: "seq"
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4, max_queue_delay_microseconds: 7 }
  state [ { input_name: "IN_STATE", output_name: "OUT_STATE", data_type: TYPE_INT32, dims: [ 2, -1 ],
            initial_state { data_type: TYPE_INT32, dims: [ 2, 3 ], zero_data: true, name: "zeros" } } ]
}
"""


def test_parse_real_config() -> None:
    config = parse_model_config(SIMPLE)
    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.input[1].dims) == [-1, 2]
    assert list(config.input[1].reshape.shape) == [-1, 1, 2]
    assert config.input[1].data_type == mc.TYPE_STRING
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.priority_queue_policy[2].max_queue_size == 3
    assert config.parameters["k"].string_value == "v"


@pytest.mark.parametrize(
    ("text", "line", "column", "detail"),
    [
        (
            'name: "m"\nmax_batch_size: 4\ninput [ { name: "a" bogus: 1 } ]',
            3,
            21,
            'has no field named "bogus"',
        ),
        ('name: "m"\nmax_batch_size: "four"', 2, 17, "Couldn't parse integer"),
        (
            'name: "m"\ninput { name: "a" data_type: TYPE_FP33 }',
            2,
            30,
            "has no value named TYPE_FP33",
        ),
        ('name: "m"\n\nname: "n"', 3, 7, 'should not have multiple "name" fields'),
        ('name: "m"\ninput [ { name: "a" }', 2, 22, 'Expected ","'),
        (
            'name: "m"\nensemble_scheduling {}\ndynamic_batching {}',
            3,
            1,
            'another member of oneof "scheduling_choice"',
        ),
    ],
)
def test_parse_error_names_source_line_and_column(
    text: str, line: int, column: int, detail: str
) -> None:
    with pytest.raises(InvalidModelConfig) as info:
        parse_model_config(text, source="repo/m/config.pbtxt")
    message = str(info.value)
    assert message.startswith(
        f"failed to parse model config 'repo/m/config.pbtxt' at line {line}, column {column}: "
    )
    assert detail in message
    assert info.value.code is StatusCode.INVALID_ARG
    assert isinstance(info.value, InvalidArgument)


def test_parse_error_default_source() -> None:
    with pytest.raises(
        InvalidModelConfig, match=r"^failed to parse model config '<string>' at line 1, column"
    ):
        parse_model_config("max_batch_size: -")


def test_read_model_config_missing_returns_none(tmp_path: Path) -> None:
    assert read_model_config(tmp_path) is None
    assert read_model_config(tmp_path / "absent") is None


def test_read_model_config_reads_config_pbtxt(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text(SIMPLE)
    config = read_model_config(tmp_path)
    assert config is not None and config.name == "simple"


def test_read_model_config_prefers_named_config(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m" max_batch_size: 1')
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "h100.pbtxt").write_text('name: "m" max_batch_size: 32')
    assert read_model_config(tmp_path, "h100").max_batch_size == 32  # type: ignore[union-attr]
    assert read_model_config(tmp_path, "a100").max_batch_size == 1  # type: ignore[union-attr]
    assert read_model_config(tmp_path).max_batch_size == 1  # type: ignore[union-attr]


def test_read_model_config_parse_error_names_file(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m"\nmax_batch_size: x\n')
    with pytest.raises(InvalidModelConfig) as info:
        read_model_config(tmp_path)
    assert f"'{tmp_path / 'config.pbtxt'}' at line 2, column 17" in str(info.value)


@pytest.mark.parametrize("kind", ["bad-utf8", "directory"])
def test_read_model_config_unreadable(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.pbtxt"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b'name: "\xff\xfe"')
    with pytest.raises(
        InvalidModelConfig, match=r"^failed to read text proto from .*config\.pbtxt"
    ):
        read_model_config(tmp_path)


def test_to_json_int64_as_numbers_and_defaults() -> None:
    data = model_config_to_json(parse_model_config(SIMPLE))
    assert data["max_batch_size"] == 8
    assert data["input"][0]["dims"] == [16]
    assert data["input"][1]["dims"] == [-1, 2]
    assert data["input"][1]["reshape"] == {"shape": [-1, 1, 2]}
    assert data["version_policy"] == {"specific": {"versions": [1, 3]}}
    batcher = data["dynamic_batching"]
    assert batcher["max_queue_delay_microseconds"] == 100
    assert batcher["priority_levels"] == 2 and batcher["default_priority_level"] == 1
    policy = batcher["priority_queue_policy"]["2"]  # map keys stay JSON strings
    assert policy["default_timeout_microseconds"] == 5000000
    assert policy["timeout_action"] == "DELAY"
    assert data["model_warmup"][0]["inputs"]["INPUT0"]["dims"] == [16]
    # enums by name, defaults printed
    assert data["input"][0]["data_type"] == "TYPE_INT32"
    assert data["input"][1]["data_type"] == "TYPE_STRING"
    assert data["input"][0]["format"] == "FORMAT_NONE"
    assert data["input"][0]["optional"] is False
    assert data["instance_group"][0]["kind"] == "KIND_CPU"
    assert data["instance_group"][0]["gpus"] == []
    assert data["backend"] == "" and data["output"][0]["label_filename"] == "labels.txt"
    assert data["batch_input"] == [] and data["cc_model_filenames"] == {}
    # unset sub-messages omitted
    for absent in ("sequence_batching", "ensemble_scheduling", "optimization", "response_cache"):
        assert absent not in data
    assert "reshape" not in data["input"][0]
    _assert_no_int_strings(data)


def test_to_json_prints_default_scalars_of_empty_config() -> None:
    data = model_config_to_json(mc.ModelConfig(name="m"))
    assert data["max_batch_size"] == 0
    assert data["input"] == [] and data["output"] == []
    assert data["platform"] == "" and data["parameters"] == {}
    assert "version_policy" not in data
    assert list(data)[:4] == ["name", "platform", "backend", "runtime"]  # proto field order


def test_to_json_ensemble_and_sequence_fields() -> None:
    data = model_config_to_json(parse_model_config(ENSEMBLE))
    assert data["ensemble_scheduling"]["step"][0]["model_version"] == -1
    _assert_no_int_strings(data)
    data = model_config_to_json(parse_model_config(SEQUENCE))
    batcher = data["sequence_batching"]
    assert batcher["max_sequence_idle_microseconds"] == 5000000
    assert batcher["oldest"]["max_queue_delay_microseconds"] == 7
    assert batcher["state"][0]["dims"] == [2, -1]
    assert batcher["state"][0]["initial_state"][0]["dims"] == [2, 3]
    _assert_no_int_strings(data)


def test_to_json_is_json_serializable_and_round_trips() -> None:
    original = parse_model_config(SIMPLE)
    text = json.dumps(model_config_to_json(original))
    assert model_config_from_json(text) == original
    assert model_config_from_json(json.loads(text)) == original
    for text in (ENSEMBLE, SEQUENCE):
        config = parse_model_config(text)
        assert model_config_from_json(model_config_to_json(config)) == config


def test_from_json_accepts_load_api_forms() -> None:
    config = model_config_from_json(
        '{"name": "m", "backend": "onnxruntime", "maxBatchSize": 4, '
        '"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["-1", 3]}]}'
    )
    assert config.max_batch_size == 4
    assert list(config.input[0].dims) == [-1, 3]
    assert config.input[0].data_type == mc.TYPE_FP32


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ('{"name": "m", "bogus": 1}', 'no field named "bogus"'),
        ('{"name": "m", "max_batch_size": 3', "Expecting ',' delimiter"),
        ('{"name": 3}', "name"),
        ('[{"name": "m"}]', "must be an object, got list"),
        ('{"input": [{"data_type": "TYPE_NOPE"}]}', "TYPE_NOPE"),
        ("", "Expecting value"),
    ],
)
def test_from_json_errors(payload: str, fragment: str) -> None:
    with pytest.raises(InvalidModelConfig) as info:
        model_config_from_json(payload)
    assert str(info.value).startswith(("failed to parse model config JSON: ", "model config JSON"))
    assert fragment in str(info.value)


def test_to_text_round_trips() -> None:
    original = parse_model_config(SIMPLE)
    text = model_config_to_text(original)
    assert 'name: "simple"' in text
    assert parse_model_config(text) == original
    unicode = mc.ModelConfig(
        name="m", parameters={"label": mc.ModelParameter(string_value="héllo")}
    )
    assert "héllo" in model_config_to_text(unicode)
    assert parse_model_config(model_config_to_text(unicode)) == unicode


def _assert_no_int_strings(value: object) -> None:
    """No JSON string anywhere looks like an integer (all 64-bit ints fixed)."""
    if isinstance(value, dict):
        for item in value.values():
            _assert_no_int_strings(item)
    elif isinstance(value, list):
        for item in value:
            _assert_no_int_strings(item)
    elif isinstance(value, str):
        assert not value.lstrip("-").isdigit(), value
