"""The onnxruntime backend's load-time checks of the config against the graph, worded as
Triton's onnxruntime backend words them (L0_model_config's too_few_inputs, too_many_inputs,
unknown_input, unknown_output)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

IN0 = '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }'
IN1 = '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }'
OUTS = ('output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, '
        '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]')


def config(name: str, inputs: list[str], outputs: str = OUTS) -> str:
    return f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninput [ {", ".join(inputs)} ]\n{outputs}\n'


CASES = {
    "too_few_inputs": (config("too_few_inputs", [IN1]),
                       "unable to load model 'too_few_inputs', configuration expects 1 inputs, model provides 2"),
    "too_many_inputs": (config("too_many_inputs", [IN0, IN1, IN1.replace("INPUT1", "INPUT_EXTRA")]),
                        "unable to load model 'too_many_inputs', configuration expects 3 inputs, model provides 2"),
    "unknown_input": (config("unknown_input", [IN0, IN1.replace("INPUT1", "INPUT_UNKNOWN")]),
                      "unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1"),
    "unknown_output": (config("unknown_output", [IN0, IN1],
                              'output [ { name: "OUTPUT_UNKNOWN" data_type: TYPE_FP32 dims: [ 16 ] } ]'),
                       "unexpected inference output 'OUTPUT_UNKNOWN', allowed outputs are: OUTPUT0, OUTPUT1"),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_config_inputs_and_outputs_must_match_the_graph(tmp_path: Path, name: str) -> None:
    text, reason = CASES[name]
    write_model(tmp_path, name, text, add_sub_graph())
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        index = {(r["name"], r.get("version")): r for r in await server.repository_index()}
        assert index[("add_sub", "1")]["state"] == "READY"
        assert index[(name, "1")]["state"] == "UNAVAILABLE"
        assert reason in index[(name, "1")]["reason"]
