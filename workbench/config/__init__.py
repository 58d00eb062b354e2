"""The model-config layer: ``config.pbtxt`` <-> ``inference.ModelConfig``.

Parse and print (:mod:`.model_config`), auto-complete from the model files
(:mod:`.autocomplete`), fill Triton's defaults (:mod:`.normalize`), validate
with Triton's messages (:mod:`.validate`), and find / select version folders
(:mod:`.versions`). The one schema is ``tritonclient.grpc.model_config_pb2.ModelConfig``.

A typical load, in Triton's order::

    config = read_model_config(model_dir, config_name)          # None if absent
    config = autocomplete_model_config(config, name, model_dir, strict=strict)
    config = normalize_model_config(config, gpu_count=gpus)
    validate_model_config(config, name, known_backends=servable)
    versions = select_versions(config, scan_version_dirs(model_dir))
"""

from __future__ import annotations

from workbench.config.autocomplete import autocomplete_model_config
from workbench.config.model_config import (
    model_config_from_json,
    model_config_to_json,
    model_config_to_text,
    parse_model_config,
    read_model_config,
)
from workbench.config.normalize import normalize_model_config
from workbench.config.validate import validate_model_config
from workbench.config.versions import scan_version_dirs, select_versions

__all__ = [
    "autocomplete_model_config",
    "model_config_from_json",
    "model_config_to_json",
    "model_config_to_text",
    "normalize_model_config",
    "parse_model_config",
    "read_model_config",
    "scan_version_dirs",
    "select_versions",
    "validate_model_config",
]
