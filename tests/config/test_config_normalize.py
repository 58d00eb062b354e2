"""Triton's defaults (TRITON_COMPAT 2.2, 2.4, 2.5, 2.9)."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workbench.config import model_config_to_json, normalize_model_config, parse_model_config

CPU, GPU, AUTO, MODEL = (
    mc.ModelInstanceGroup.KIND_CPU,
    mc.ModelInstanceGroup.KIND_GPU,
    mc.ModelInstanceGroup.KIND_AUTO,
    mc.ModelInstanceGroup.KIND_MODEL,
)


def _groups(config: mc.ModelConfig) -> list[tuple[str, int, int, list[int]]]:
    return [(g.name, g.kind, g.count, list(g.gpus)) for g in config.instance_group]


def test_defaults_for_minimal_onnx_config() -> None:
    original = parse_model_config(
        'name: "m" backend: "onnxruntime" platform: "onnxruntime_onnx" max_batch_size: 8'
    )
    snapshot = original.SerializeToString()
    config = normalize_model_config(original)
    assert original.SerializeToString() == snapshot  # not mutated
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1
    assert _groups(config) == [("m", CPU, 2, [])]  # onnxruntime on CPU: 2 instances
    assert config.optimization.input_pinned_memory.enable is True
    assert config.optimization.output_pinned_memory.enable is True
    assert not config.HasField("dynamic_batching")
    data = model_config_to_json(config)
    assert data["instance_group"] == [
        {
            "name": "m",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert data["version_policy"] == {"latest": {"num_versions": 1}}
    assert data["optimization"]["input_pinned_memory"] == {"enable": True}


@pytest.mark.parametrize(
    ("backend", "gpu_count", "expected"),
    [
        ("python", 0, [("m", CPU, 1, [])]),
        ("pytorch", 0, [("m", CPU, 1, [])]),
        ("onnxruntime", 2, [("m", GPU, 1, [0, 1])]),
        ("python", 1, [("m", GPU, 1, [0])]),
        ("openvino", 2, [("m", CPU, 1, [])]),  # CPU-only backend
        ("identity", 1, [("m", CPU, 1, [])]),
    ],
)
def test_default_instance_group(
    backend: str, gpu_count: int, expected: list[tuple[str, int, int, list[int]]]
) -> None:
    config = normalize_model_config(
        parse_model_config(f'name: "m" backend: "{backend}"'), gpu_count=gpu_count
    )
    assert _groups(config) == expected


def test_explicit_groups_are_completed() -> None:
    text = """
    name: "m"
    backend: "onnxruntime"
    instance_group [
      { kind: KIND_CPU },
      { name: "fast", kind: KIND_GPU, count: 3 },
      { kind: KIND_AUTO, gpus: [ 5 ] },
      { kind: KIND_AUTO, count: 4 },
      { kind: KIND_MODEL },
      { kind: KIND_GPU, gpus: [ 1 ], count: -1 }
    ]
    """
    config = normalize_model_config(parse_model_config(text), gpu_count=2)
    assert _groups(config) == [
        ("m_0", CPU, 2, []),
        ("fast", GPU, 3, [0, 1]),
        (
            "m_2",
            CPU,
            2,
            [5],
        ),  # a listed gpu that does not exist -> CPU (validate then rejects the gpus)
        ("m_3", GPU, 4, [0, 1]),
        ("m_4", MODEL, 1, []),
        ("m_5", GPU, 1, [1]),
    ]


def test_gpu_group_without_gpus_stays_empty() -> None:
    config = normalize_model_config(
        parse_model_config('name: "m" backend: "python" instance_group { kind: KIND_GPU }')
    )
    assert _groups(config) == [("m_0", GPU, 1, [])]
    auto = normalize_model_config(
        parse_model_config('name: "m" backend: "python" instance_group { kind: KIND_AUTO }')
    )
    assert _groups(auto) == [("m_0", CPU, 1, [])]


@pytest.mark.parametrize(
    ("text", "preferred"),
    [
        ("max_batch_size: 8 dynamic_batching {}", [8]),
        ("max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 4] }", [2, 4]),
        ("max_batch_size: 0 dynamic_batching {}", []),
    ],
)
def test_dynamic_batching_preferred_default(text: str, preferred: list[int]) -> None:
    config = normalize_model_config(parse_model_config(f'name: "m" backend: "python" {text}'))
    assert list(config.dynamic_batching.preferred_batch_size) == preferred


def test_sequence_batching_defaults() -> None:
    config = normalize_model_config(
        parse_model_config(
            'name: "m" backend: "python" max_batch_size: 4 sequence_batching { oldest {} }'
        )
    )
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [4]
    kept = normalize_model_config(
        parse_model_config(
            'name: "m" backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 }'
        )
    )
    assert kept.sequence_batching.max_sequence_idle_microseconds == 5
    assert model_config_to_json(kept)["sequence_batching"]["max_sequence_idle_microseconds"] == 5


def test_explicit_values_are_kept() -> None:
    text = """
    name: "m"
    backend: "python"
    version_policy { all {} }
    optimization { input_pinned_memory { enable: false } }
    """
    config = normalize_model_config(parse_model_config(text))
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    assert config.optimization.input_pinned_memory.enable is False
    assert config.optimization.output_pinned_memory.enable is True


def test_ensemble_gets_no_instance_group_or_optimization() -> None:
    text = """
    name: "ens"
    platform: "ensemble"
    ensemble_scheduling {
      step [ {
        model_name: "a", model_version: -1, input_map { key: "x" value: "IN" }, output_map { key: "y" value: "OUT" }
      } ]
    }
    """
    config = normalize_model_config(parse_model_config(text), gpu_count=1)
    assert len(config.instance_group) == 0
    assert not config.HasField("optimization")
    assert config.version_policy.latest.num_versions == 1
