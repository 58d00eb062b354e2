"""Every validation rule fires with its text; good configs pass."""

from __future__ import annotations

import logging
from collections.abc import Collection

import pytest

from workbench.common.errors import InvalidModelConfig, StatusCode
from workbench.config import normalize_model_config, parse_model_config, validate_model_config

GOOD_ONNX = """
name: "m"
backend: "onnxruntime"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy { latest { num_versions: 2 } }
input [
  { name: "a", data_type: TYPE_FP32, dims: [ 2, 4, -1, 6 ], reshape { shape: [ 8, -1, 1, 6 ] } },
  { name: "s", data_type: TYPE_STRING, dims: [ 1 ], reshape { shape: [ ] } },
  { name: "img", data_type: TYPE_UINT8, dims: [ 3, 224, 224 ], format: FORMAT_NCHW, optional: true }
]
output [ { name: "b", data_type: TYPE_FP32, dims: [ -1 ] } ]
batch_input [ { kind: BATCH_ELEMENT_COUNT, target_name: "cnt", data_type: TYPE_INT32, source_input: "a" } ]
batch_output [ { target_name: "b", kind: BATCH_SCATTER_WITH_INPUT_SHAPE, source_input: "a" } ]
instance_group [ { kind: KIND_CPU, count: 0 }, { kind: KIND_MODEL }, { kind: KIND_AUTO, gpus: [ 0 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  priority_levels: 2
  default_priority_level: 2
  priority_queue_policy { key: 1 value { max_queue_size: 4 } }
}
response_cache { enable: true }
model_metrics {
  metric_control [ {
    metric_identifier { family: "nv_inference_first_response_histogram_ms" }
    histogram_options { buckets: [ 1, 10 ] }
  } ]
}
"""

GOOD_SEQUENCE = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
sequence_batching {
  oldest { max_candidate_sequences: 4, preferred_batch_size: [ 2, 4 ] }
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START, fp32_false_true: [ 0, 1 ] } ] },
    { name: "END", control [ { kind: CONTROL_SEQUENCE_END, bool_false_true: [ false, true ] } ] },
    { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY, int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 } ] }
  ]
}
model_transaction_policy { decoupled: true }
"""

GOOD_ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "pre", model_version: -1, input_map { key: "x" value: "IN" }, output_map { key: "y" value: "mid" } },
    { model_name: "net", model_version: 1, input_map { key: "x" value: "mid" }, output_map { key: "y" value: "OUT" } }
  ]
}
"""

GOOD_TENSORRT = """
name: "m"
backend: "tensorrt"
platform: "tensorrt_plan"
input [ { name: "a", data_type: TYPE_INT32, dims: [ 2 ], is_shape_tensor: true },
        { name: "c", data_type: TYPE_FP16, dims: [ 3, 8, 8 ], is_non_linear_format_io: true } ]
output [ { name: "b", data_type: TYPE_FP32, dims: [ 2 ] } ]
instance_group [ { kind: KIND_GPU, gpus: [ 1 ], profile: [ "0", "1" ] } ]
"""


@pytest.mark.parametrize(
    ("text", "name"),
    [(GOOD_ONNX, "m"), (GOOD_SEQUENCE, "m"), (GOOD_ENSEMBLE, "ens"), (GOOD_TENSORRT, "m")],
    ids=["onnx", "sequence", "ensemble", "tensorrt"],
)
def test_good_configs_pass_before_and_after_normalize(text: str, name: str) -> None:
    config = parse_model_config(text)
    validate_model_config(config, name)
    validate_model_config(normalize_model_config(config, gpu_count=2), name, gpu_count=2)
    validate_model_config(
        config, name, known_backends=["onnxruntime", "python", "tensorrt", "ensemble"]
    )


def test_kind_gpu_without_gpu_count_is_left_to_the_engine() -> None:
    config = parse_model_config('name: "m" backend: "python" instance_group { kind: KIND_GPU }')
    validate_model_config(config, "m")
    validate_model_config(normalize_model_config(config), "m")


def test_dynamic_batching_without_max_batch_size_warns(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_model_config('name: "m" backend: "python" dynamic_batching {}')
    caplog.set_level(logging.WARNING)
    validate_model_config(normalize_model_config(config), "m")
    assert "dynamic batching is enabled for model 'm' but max_batch_size is 0" in caplog.text


PY = 'name: "m" backend: "python" '
IO = ('input [ { name: "a", data_type: TYPE_FP32, dims: [ 4 ] } ] '
      'output [ { name: "b", data_type: TYPE_FP32, dims: [ 4 ] } ] ')
ENS_HEAD = ('name: "m" platform: "ensemble" input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ] '
            'output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ] ')


def _step(model: str = "a", inputs: str = "x: IN", outputs: str = "y: OUT") -> str:
    def entries(pairs: str, field: str) -> str:
        items = [p.split(": ") for p in pairs.split(", ") if p]
        return " ".join(f'{field} {{ key: "{k}" value: "{v}" }}' for k, v in items)

    return f'step {{ model_name: "{model}" {entries(inputs, "input_map")} {entries(outputs, "output_map")} }} '


def _seq(controls: str, extra: str = "") -> str:
    return PY + f"max_batch_size: 4 sequence_batching {{ control_input [ {controls} ] {extra} }}"


CASES: list[tuple[str, str]] = [
    # name, platform, backend
    ('backend: "python"', "model configuration must specify 'name'"),
    (
        'name: "other" backend: "python"',
        "unexpected directory name 'm' for model 'other', directory name must equal model name",
    ),
    ('name: "m"', "must specify 'platform' or 'backend' for 'm'"),
    ('name: "m" platform: "onnxruntime_onnx"', "unexpected platform type 'onnxruntime_onnx' for m"),
    (
        'name: "m" backend: "python" platform: "ensemble"',
        "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
    ),
    (
        'name: "m" backend: "onnxruntime" platform: "tensorrt_plan"',
        "unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime",
    ),
    (
        'name: "m" backend: "pytorch" platform: ""',
        "unexpected 'platform' and 'backend' pair, got:, pytorch",
    ),
    (  # tensorflow is served since issue 22: a backend no row names
        'name: "m" backend: "custom"',
        "unable to find backend library for backend 'custom', try specifying runtime on the model configuration.",
    ),
    # max batch size, version policy
    (PY + "max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
    (
        PY + "version_policy { latest { num_versions: 0 } }",
        "at least one version must be available under the version policy of model 'm': "
        "'version_policy.latest.num_versions' must be >= 1",
    ),
    (
        PY + "version_policy { specific { } }",
        "at least one version must be available under the version policy of model 'm': "
        "'version_policy.specific.versions' is empty",
    ),
    # inputs and outputs
    (PY + "input { data_type: TYPE_FP32, dims: [1] }", "model input must specify 'name' for m"),
    (PY + "output { data_type: TYPE_FP32, dims: [1] }", "model output must specify 'name' for m"),
    (PY + 'input { name: "a", dims: [1] }', "model input 'a' must specify 'data_type' for m"),
    (
        PY + 'input { name: "a", data_type: 99, dims: [1] }',
        "model input 'a' has unknown 'data_type' value 99 for m",
    ),
    (
        PY + 'output { name: "b", data_type: TYPE_FP32 }',
        "model output 'b' must specify 'dims' for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [2, 0] }',
        "model input 'a' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ),
    (
        PY + 'output { name: "b", data_type: TYPE_FP32, dims: [-2] }',
        "model output 'b' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [1], reshape { } }',
        "model input 'a' cannot have empty reshape for non-batching model as scalar tensors are not supported for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [2], reshape { shape: [0, 2] } }',
        "model input 'a' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [2, 3], reshape { shape: [5] } }',
        "model input 'a' has different size for dims and reshape for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [-1], reshape { shape: [4] } }',
        "model input 'a' has different size for dims and reshape for m",
    ),
    (
        PY
        + 'input { name: "a", data_type: TYPE_FP32, dims: [-1, 4], reshape { shape: [-1, 2, -1] } }',
        "model input 'a' has different number of variable-size dimensions for dims and reshape for m",
    ),
    (
        PY
        + 'output { name: "b", data_type: TYPE_FP32, dims: [2, 4, -1, 6], reshape { shape: [8, -1, 2, 6] } }',
        "model output 'b' has different size for dims and reshape for m",
    ),
    (
        PY
        + 'input [ { name: "a", data_type: TYPE_FP32, dims: [1] }, { name: "a", data_type: TYPE_INT32, dims: [1] } ]',
        "model input 'a' is specified more than once for m",
    ),
    (
        PY
        + 'output [ { name: "b", data_type: TYPE_FP32, dims: [1] }, { name: "b", data_type: TYPE_FP32, dims: [1] } ]',
        "model output 'b' is specified more than once for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_FP32, dims: [224, 224], format: FORMAT_NHWC }',
        "model input NHWC/NCHW require 3 dims for m",
    ),
    (
        PY + 'input { name: "a", data_type: TYPE_INT32, dims: [2], is_shape_tensor: true }',
        "shape tensors are only supported for TensorRT platform for m",
    ),
    (
        PY
        + 'output { name: "b", data_type: TYPE_FP32, dims: [3, 2, 2], is_non_linear_format_io: true }',
        "Non-linear IO format is only supported for the TensorRT platform for m",
    ),
    (
        'name: "m" platform: "tensorrt_plan" backend: "tensorrt" '
        'input { name: "a", data_type: TYPE_FP32, dims: [2, 2], is_non_linear_format_io: true }',
        "Non-linear IO format input requires 3 dims for m",
    ),
    # batch inputs / outputs
    (
        PY
        + IO
        + 'batch_input { kind: BATCH_ELEMENT_COUNT, target_name: "c", data_type: TYPE_INT32, '
          'source_input: ["a", "a"] }',
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2 for m",
    ),
    (
        PY
        + IO
        + 'batch_input { kind: BATCH_ITEM_SHAPE, target_name: "c", data_type: TYPE_FP16, source_input: "a" }',
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for m",
    ),
    (
        PY
        + IO
        + 'batch_input { kind: BATCH_ITEM_SHAPE, target_name: "c", data_type: TYPE_FP32, source_input: "zz" }',
        "unknown source input name 'zz' for m",
    ),
    (
        PY + IO + 'batch_output { kind: BATCH_SCATTER_WITH_INPUT_SHAPE, target_name: "b" }',
        "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0 for m",
    ),
    (
        PY + IO + 'batch_output { target_name: "zz", source_input: "a" }',
        "unknown target output name 'zz' for m",
    ),
    (
        PY + IO + 'batch_output { target_name: ["b", "b"], source_input: "a" }',
        "target output name 'b' can only be specified once for m",
    ),
    # dynamic batching
    (
        PY + "max_batch_size: 8 dynamic_batching { preferred_batch_size: [0] }",
        "dynamic batching preferred size must be positive for m",
    ),
    (
        PY + "max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 16] }",
        "dynamic batching preferred size must be <= max batch size for m",
    ),
    (
        PY + "dynamic_batching { preferred_batch_size: [1] }",
        "dynamic batching preferred size must be <= max batch size for m",
    ),
    (
        PY + "max_batch_size: 8 dynamic_batching { priority_levels: 2 }",
        "default priority level must be in range [1, 2] for m",
    ),
    (
        PY + "max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        "default priority level must be in range [1, 2] for m",
    ),
    (
        PY
        + "max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
          "priority_queue_policy { key: 3 value {} } }",
        "priority queue policy must have priority level in range [1, 2] for m",
    ),
    (
        PY
        + "max_batch_size: 8 dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
        "Only one priority level is allowed when 'preserve_ordering' is true for m",
    ),
    (
        PY
        + "max_batch_size: 8 dynamic_batching { preserve_ordering: true "
          "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
    ),
    (
        PY
        + "max_batch_size: 8 dynamic_batching { preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
          "priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 10 } } }",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
    ),
    # sequence batching
    (
        PY + "sequence_batching {} response_cache { enable: true }",
        "Response Cache does not currently support model m with sequence batching scheduler. Please disable the "
        "response cache.",
    ),
    (
        _seq("{ control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1] } ] }"),
        "sequence batching control tensor must have a name for m",
    ),
    (
        _seq(
            '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1] } ] }, { name: "S" }'
        ),
        "sequence batching control tensor 'S' is specified for multiple control kinds for m",
    ),
    (
        _seq(
            '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1] } ] }, '
            '{ name: "T" control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1] } ] }'
        ),
        "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
    ),
    (
        _seq('{ name: "E" control [ { kind: CONTROL_SEQUENCE_END } ] }'),
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for "
        "CONTROL_SEQUENCE_END for m",
    ),
    (
        _seq(
            '{ name: "R" control [ { kind: CONTROL_SEQUENCE_READY, int32_false_true: [0, 1], '
            'fp32_false_true: [0, 1] } ] }'
        ),
        "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' "
        "for CONTROL_SEQUENCE_READY for m",
    ),
    (
        _seq('{ name: "R" control [ { kind: CONTROL_SEQUENCE_READY, bool_false_true: [true] } ] }'),
        "sequence batching control 'bool_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_READY for m",
    ),
    (
        _seq(
            '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64, '
            'int32_false_true: [0, 1] } ] }'
        ),
        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for "
        "CONTROL_SEQUENCE_CORRID for m",
    ),
    (
        _seq('{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_FP32 } ] }'),
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, "
        "TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
    ),
    (
        _seq("", "oldest { preferred_batch_size: [0] }"),
        "sequence batching preferred batch size must be positive for m",
    ),
    (
        _seq("", "oldest { preferred_batch_size: [8] }"),
        "sequence batching preferred batch size must be <= max batch size for m",
    ),
    (
        _seq("", "direct { minimum_slot_utilization: 1.5 }"),
        "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
    ),
    # ensembles
    (
        'name: "m" platform: "ensemble"',
        "ensemble scheduling must be set for ensemble m whose platform is ensemble",
    ),
    (
        PY + "ensemble_scheduling { " + _step() + "}",
        "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
    ),
    (
        ENS_HEAD + "instance_group {} ensemble_scheduling { " + _step() + "}",
        "instance group should not be specified for ensemble 'm'",
    ),
    (
        ENS_HEAD + "optimization {} ensemble_scheduling { " + _step() + "}",
        "optimization should not be specified for ensemble 'm'",
    ),
    (
        ENS_HEAD + 'model_warmup { name: "w" } ensemble_scheduling { ' + _step() + "}",
        "model_warmup can not be specified for ensemble 'm'",
    ),
    (ENS_HEAD + "ensemble_scheduling { }", "must specify 'step' for ensemble 'm'"),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step(model="") + "}",
        "must specify 'model_name' in step 0 of ensemble 'm'",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step() + _step(inputs="") + "}",
        "must specify 'input_map' in step 1 of ensemble 'm'",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step(outputs="") + "}",
        "must specify 'output_map' in step 0 of ensemble 'm'",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step() + _step(model="b") + "}",
        "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'm' step 1",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step(inputs="x: OTHER") + "}",
        "ensemble input 'IN' for ensemble m' is not used",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step(outputs="y: ELSE") + "}",
        "ensemble output 'OUT' for ensemble m' is not used",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step(inputs="x: IN, z: GHOST") + "}",
        "output 'OUT' for ensemble 'm' is not written: at least one of its depending tensors, 'GHOST', is not "
        "connected",
    ),
    (
        ENS_HEAD + "ensemble_scheduling { " + _step() + _step(model="b", outputs="y: SPARE") + "}",
        "ensemble tensor 'SPARE' is unused in ensemble 'm'",
    ),
    (
        ENS_HEAD
        + "ensemble_scheduling { "
        + _step()
        + _step(model="loop", inputs="x: LOOP", outputs="y: LOOP")
        + "}",
        "ensemble tensor 'LOOP' is unused in ensemble 'm'; its steps form a cycle: "
        "step 1 'loop' -> step 1 'loop'",
    ),
    # response cache with decoupled
    (
        PY + "model_transaction_policy { decoupled: true } response_cache { enable: true }",
        "Response Cache does not currently support model m with 'decoupled' transaction policy. Please disable the "
        "response cache.",
    ),
    # instance groups
    (
        PY + 'instance_group { name: "g" kind: 7 }',
        "instance group g of model m has unexpected kind 7",
    ),
    (
        PY + 'instance_group { name: "g" count: -2 }',
        "instance group g of model m must specify a non-negative 'count', got -2",
    ),
    (
        PY + 'instance_group { name: "g" kind: KIND_CPU gpus: [0] }',
        "instance group g of model m has kind KIND_CPU but specifies one or more GPUs",
    ),
    (
        PY + 'instance_group { name: "g" kind: KIND_MODEL gpus: [0] }',
        "instance group g of model m has kind KIND_MODEL but specifies one or more GPUs",
    ),
    (
        PY + 'instance_group { name: "g" kind: KIND_GPU profile: "0" }',
        "instance group g of model m and platform  specifies profile field which is only supported for TensorRT models",
    ),
    (
        'name: "m" backend: "tensorrt" platform: "tensorrt_plan" instance_group { name: "g" kind: KIND_GPU profile: '
        '"x1" }',
        "instance group g of model m and platform tensorrt_plan specifies invalid profile x1. The field should "
        "contain the string representation of a non-negative integer.",
    ),
    # model metrics
    (
        PY + "model_metrics { metric_control {} }",
        "metric control must specify 'metric_identifier' for m",
    ),
    (
        PY + "model_metrics { metric_control { metric_identifier {} } }",
        "metric identifier must specify non-empty 'family' for m",
    ),
    (
        PY + 'model_metrics { metric_control { metric_identifier { family: "f" } } }',
        "metric control must specify 'histogram_options' for m",
    ),
    (
        PY
        + 'model_metrics { metric_control { metric_identifier { family: "f" } histogram_options {} } }',
        "histogram options must specify non-empty 'buckets' for m",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES, ids=[f"{i:02d}" for i in range(len(CASES))])
def test_rule_fires_with_its_text(text: str, message: str) -> None:
    config = parse_model_config(text)
    with pytest.raises(InvalidModelConfig) as info:
        validate_model_config(config, "m")
    assert str(info.value) == message
    assert info.value.code is StatusCode.INVALID_ARG


@pytest.mark.parametrize(
    ("text", "known", "message"),
    [
        (
            PY,
            ["onnxruntime"],
            "unable to find backend library for backend 'python', try specifying runtime on the model configuration.",
        ),
        (
            GOOD_ENSEMBLE.replace('"ens"', '"m"'),
            ["onnxruntime", "python"],
            "ensemble scheduling not supported",
        ),
        ('name: "m" backend: "custom"', ["custom", "ensemble"], None),
    ],
)
def test_known_backends(text: str, known: Collection[str], message: str | None) -> None:
    config = parse_model_config(text)
    if message is None:
        validate_model_config(config, "m", known_backends=known)
        return
    with pytest.raises(InvalidModelConfig) as info:
        validate_model_config(config, "m", known_backends=known)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("group", "gpu_count", "message"),
    [
        (
            "kind: KIND_GPU",
            0,
            "instance group g of model m has kind KIND_GPU but no GPUs are available",
        ),
        (
            "kind: KIND_GPU gpus: [0, 3]",
            2,
            "instance group g of model m specifies invalid or unsupported gpu id 3. GPUs available are: 0, 1",
        ),
        ("kind: KIND_GPU gpus: [1]", 2, None),
        ("kind: KIND_CPU", 0, None),
    ],
)
def test_gpu_ids_checked_when_gpu_count_given(
    group: str, gpu_count: int, message: str | None
) -> None:
    config = parse_model_config(PY + f'instance_group {{ name: "g" {group} }}')
    if message is None:
        validate_model_config(config, "m", gpu_count=gpu_count)
        return
    with pytest.raises(InvalidModelConfig) as info:
        validate_model_config(config, "m", gpu_count=gpu_count)
    assert str(info.value) == message
