"""Normalized configs and validation texts as Triton gives them (L0_model_config)."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from workbench.config.model_config import model_config_to_json, model_config_to_text
from workbench.config.normalize import normalize_model_config

ENSEMBLE = """
name: "ens" platform: "ensemble" max_batch_size: 2
input [ { name: "data" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "prob" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "inner" model_version: -1
  input_map { key: "data" value: "data" } output_map { key: "prob" value: "prob" } } ] }
"""


def test_normalized_ensemble_has_an_empty_transaction_policy() -> None:
    """Triton's normalized ensemble config ends with ``model_transaction_policy {\\n}``."""
    config = normalize_model_config(text_format.Parse(ENSEMBLE, mc.ModelConfig()))
    assert config.HasField("model_transaction_policy")
    assert "model_transaction_policy {\n}" in model_config_to_text(config)
    assert model_config_to_json(config)["model_transaction_policy"] == {"decoupled": False}
    assert not normalize_model_config(mc.ModelConfig(name="m", backend="onnxruntime")).HasField(
        "model_transaction_policy")
