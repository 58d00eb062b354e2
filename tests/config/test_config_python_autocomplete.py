"""Auto-complete of Python models: ``TritonPythonModel.auto_complete_config`` run by the config
layer in the stub program's ``--auto-complete`` mode (a real subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workbench.config.autocomplete import autocomplete_model_config
from workbench.config.model_config import parse_model_config
from workbench.errors import InvalidModelConfig

MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
{body}
        return auto_complete_model_config

    def execute(self, requests):
        return []
'''


def python_model(tmp_path: Path, body: str, config: str | None = 'backend: "python"') -> Path:
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    indented = "\n".join("        " + line for line in body.strip().splitlines())
    (folder / "1" / "model.py").write_text(MODEL.format(body=indented))
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    return folder


def complete(folder: Path, strict: bool = False) -> mc.ModelConfig:
    path = folder / "config.pbtxt"
    config = parse_model_config(path.read_text()) if path.exists() else None
    return autocomplete_model_config(config, folder.name, folder, strict=strict)


def test_inputs_outputs_batching_and_policy_are_merged(tmp_path: Path) -> None:
    folder = python_model(tmp_path, '''
auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [-1]})
auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]})
auto_complete_model_config.set_max_batch_size(0)
auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
print("the model may print")
''', config=None)
    config = complete(folder)
    assert config.name == "m" and config.backend == "python"
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("IN", mc.TYPE_INT32, [-1])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUT", [1])]
    assert config.model_transaction_policy.decoupled
    assert not config.HasField("dynamic_batching")


def test_only_triton_merged_fields_come_back(tmp_path: Path) -> None:
    folder = python_model(tmp_path, '''
config = auto_complete_model_config.as_dict()
config["parameters"] = {"X": {"string_value": "y"}}
auto_complete_model_config.set_max_batch_size(16)
auto_complete_model_config.set_dynamic_batching()
''', config='backend: "python"\nmax_batch_size: 4\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ]')
    config = complete(folder)
    assert config.max_batch_size == 16 and config.HasField("dynamic_batching")
    assert [i.name for i in config.input] == ["A"] and not config.parameters


def test_errors_in_auto_complete_fail_the_config_with_the_python_error(tmp_path: Path) -> None:
    folder = python_model(tmp_path, '''
auto_complete_model_config.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [2]})
''', config='backend: "python"\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ]')
    with pytest.raises(InvalidModelConfig) as caught:
        complete(folder)
    assert caught.value.message.startswith("auto-complete of model 'm' failed: auto_complete_config() raised "
                                           "ValueError: unable to load model 'm', configuration expects "
                                           "datatype TYPE_FP32 for input 'A', model provides TYPE_INT32")


def test_strict_mode_does_not_run_the_model(tmp_path: Path) -> None:
    folder = python_model(tmp_path, 'raise RuntimeError("must not run")')
    config = complete(folder, strict=True)
    assert config.backend == "python" and not config.input
    with pytest.raises(InvalidModelConfig, match="must not run"):
        complete(folder)
