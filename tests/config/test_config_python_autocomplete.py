"""Auto-complete of Python models: ``TritonPythonModel.auto_complete_config`` run by the config
layer in the stub program's ``--auto-complete`` mode (a real subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig
from workbench.config.autocomplete import autocomplete_model_config
from workbench.config.model_config import parse_model_config

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
    assert caught.value.message.startswith("ValueError: unable to load model 'm', configuration expects "
                                           "datatype TYPE_FP32 for input 'A', model provides TYPE_INT32")


def test_strict_mode_does_not_run_the_model(tmp_path: Path) -> None:
    folder = python_model(tmp_path, 'raise RuntimeError("must not run")')
    config = complete(folder, strict=True)
    assert config.backend == "python" and not config.input
    with pytest.raises(InvalidModelConfig, match="must not run"):
        complete(folder)


IO_CONFIG = ('backend: "python"\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
             'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
ADD_IN = 'auto_complete_model_config.add_input({})'
ADD_OUT = 'auto_complete_model_config.add_output({})'

#: (config.pbtxt, auto_complete_config body, the error Triton's python backend reports)
HELPER_ERRORS = {
    "max_batch_size_below_config": (
        'backend: "python"\nmax_batch_size: 6', "auto_complete_model_config.set_max_batch_size(4)",
        "ValueError: configuration specified max_batch_size 6, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 4"),
    "scheduler_conflict": (
        'backend: "python"\nsequence_batching {}', "auto_complete_model_config.set_dynamic_batching()",
        "ValueError: Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'm' tries to set scheduling_choice as 'dynamic_batching'"),
    "input_datatype_conflict": (
        IO_CONFIG, ADD_IN.format('{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}'),
        "ValueError: unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', "
        "model provides TYPE_INT32"),
    "output_dims_conflict": (
        IO_CONFIG, ADD_OUT.format('{"name": "OUT", "data_type": "TYPE_FP32", "dims": [16]}'),
        "ValueError: model 'm', tensor 'OUT': the model expects dims [16] but the model configuration "
        "specifies dims [4]"),
    "input_optional_conflict": (
        IO_CONFIG.replace("dims: [ 4 ] }", "dims: [ 4 ] optional: true }", 1),
        ADD_IN.format('{"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": False}'),
        "ValueError: model 'm', tensor 'IN': the model expects optional False but the model configuration "
        "specifies optional True"),
    "input_missing_name": (
        IO_CONFIG, ADD_IN.format('{"data_type": "TYPE_FP32", "dims": [4]}'),
        "ValueError: input in auto-complete-config function for model 'm' is missing 'name' property."),
    "output_missing_data_type": (
        IO_CONFIG, ADD_OUT.format('{"name": "OUT", "dims": [4]}'),
        "ValueError: output 'OUT' in auto-complete-config function for model 'm' is missing 'data_type' "
        "property."),
    "input_unknown_property": (
        IO_CONFIG, ADD_IN.format('{"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "is_shape_tensor": True}'),
        "ValueError: input 'IN' in auto-complete-config function for model 'm' contains property other than "
        "'name', 'data_type', 'dims' and 'optional'."),
    "unknown_property_before_missing_dims": (
        IO_CONFIG, ADD_IN.format('{"name": "IN", "data_type": "TYPE_FP32", "shape": [4]}'),
        "ValueError: input 'IN' in auto-complete-config function for model 'm' contains property other than "
        "'name', 'data_type', 'dims' and 'optional'."),
    "output_optional_is_unknown": (
        IO_CONFIG, ADD_OUT.format('{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4], "optional": True}'),
        "ValueError: output 'OUT' in auto-complete-config function for model 'm' contains property other "
        "than 'name', 'data_type' and 'dims'."),
    "policy_unknown_key": (
        'backend: "python"', 'auto_complete_model_config.set_model_transaction_policy({"decoupled": True, "x": 1})',
        "ValueError: model transaction property in auto-complete-config function for model 'm' contains "
        "property other than 'decoupled'."),
    "policy_conflict": (
        'backend: "python"\nmodel_transaction_policy { decoupled: false }',
        'auto_complete_model_config.set_model_transaction_policy({"decoupled": True})',
        "ValueError: trying to change decoupled property in auto-complete-config for model 'm', which is "
        "already set to 'False'."),
    "no_return": (
        'backend: "python"', "return None",
        "auto_complete_config function in model 'm' must return a valid pb.ModelConfig object."),
}


@pytest.mark.parametrize("case", sorted(HELPER_ERRORS))
def test_helper_misuse_fails_with_triton_python_backend_texts(tmp_path: Path, case: str) -> None:
    config, body, expected = HELPER_ERRORS[case]
    with pytest.raises(InvalidModelConfig) as caught:
        complete(python_model(tmp_path, body, config=config))
    message = caught.value.message
    assert message.split("\n\nAt:\n")[0] == expected
    if expected.startswith("ValueError: "):  # the model's frames follow, as pybind11 words them
        assert "model.py(" in message.split("\n\nAt:\n")[1]


def test_empty_transaction_policy_keeps_the_configs_decoupled(tmp_path: Path) -> None:
    folder = python_model(tmp_path, "auto_complete_model_config.set_model_transaction_policy({})",
                          config='backend: "python"\nmodel_transaction_policy { decoupled: true }')
    assert complete(folder).model_transaction_policy.decoupled
