"""Ensemble checks of the config layer: one config (cycles, ensemble inputs written by a
step) and against the composing models' configs (Triton's ``ValidateEnsembleConfig``)."""

from __future__ import annotations

import pytest

from workbench.common.errors import InvalidModelConfig
from workbench.config import normalize_model_config, parse_model_config, validate_model_config
from workbench.config.validate_ensemble import (
    check_ensemble_steps,
    circular_dependency,
    composing_models,
)

HEAD = """
name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 16 ] } ]
"""

ADD_SUB = """
name: "add_sub"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 16 ] } ]
"""


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'step {{ model_name: "{model}" model_version: {version} {" ".join(maps)} }} '


def ensemble(*steps: str, head: str = HEAD):
    return parse_model_config(head + "ensemble_scheduling { " + "".join(steps) + "}")


def composing(**texts: str):
    return {name: normalize_model_config(parse_model_config(text)) for name, text in texts.items()}


ADD = step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT0": "OUT"})


def test_good_ensemble_passes_both_stages() -> None:
    config = ensemble(ADD)
    validate_model_config(config, "e")
    check_ensemble_steps(normalize_model_config(config), composing(add_sub=ADD_SUB))
    assert composing_models(config) == ["add_sub"]


def test_two_step_cycle_is_named() -> None:
    config = ensemble(
        step("a", {"x": "IN", "y": "T2"}, {"z": "T1"}),
        step("b", {"x": "T1"}, {"z": "T2"}),
        step("c", {"x": "T1"}, {"z": "OUT"}),
    )
    with pytest.raises(InvalidModelConfig) as info:
        validate_model_config(config, "e")
    assert info.value.message.startswith("output 'OUT' for ensemble 'e' is not written")
    assert info.value.message.endswith("its steps form a cycle: step 0 'a' -> step 1 'b' -> step 0 'a'")


def test_step_may_not_write_an_ensemble_input() -> None:
    config = ensemble(ADD, step("b", {"x": "OUT"}, {"y": "IN"}))
    with pytest.raises(InvalidModelConfig, match="ensemble input 'IN' is written by step 1"):
        validate_model_config(config, "e")


WRONG_TYPE = ADD_SUB.replace('"INPUT1", data_type: TYPE_FP32', '"INPUT1", data_type: TYPE_INT32')
NARROW = ADD_SUB.replace('"OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ]',
                         '"OUTPUT0", data_type: TYPE_FP32, dims: [ 8 ]')
SMALL_BATCH = ADD_SUB.replace("max_batch_size: 8", "max_batch_size: 2")
NO_BATCH = ADD_SUB.replace("max_batch_size: 8", "max_batch_size: 0").replace("dims: [ 16 ]", "dims: [ -1, 16 ]")
DECOUPLED = ADD_SUB + "model_transaction_policy { decoupled: true }"
OPTIONAL = ADD_SUB.replace('"INPUT1", data_type: TYPE_FP32, dims: [ 16 ]',
                           '"INPUT1", data_type: TYPE_FP32, dims: [ 16 ], optional: true')


@pytest.mark.parametrize(
    ("steps", "model", "message"),
    [
        (
            [ADD],
            SMALL_BATCH,
            "ensemble e allows maximum batch size 8, but it contains model add_sub which only "
            "allows maximum batch size to be 2",
        ),
        (
            [step("add_sub", {"INPUT0": "IN", "INPUT1": "IN", "BOGUS": "IN"}, {"OUTPUT0": "OUT"})],
            ADD_SUB,
            "in ensemble e, ensemble tensor IN is mapping to non-existing input BOGUS in model add_sub",
        ),
        (
            [step("add_sub", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})],
            ADD_SUB,
            "in ensemble e, input INPUT1 in model add_sub is not mapped to any ensemble tensors",
        ),
        (
            [step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT9": "OUT"})],
            ADD_SUB,
            "in ensemble e, ensemble tensor OUT is mapped from non-existing output OUTPUT9 in model add_sub",
        ),
        (
            [ADD],
            WRONG_TYPE,
            "in ensemble e, ensemble tensor IN: inconsistent data type: TYPE_FP32 is inferred "
            "from model e while TYPE_INT32 is inferred from model add_sub",
        ),
        (
            [ADD],
            NARROW,
            "in ensemble e, ensemble tensor OUT: inconsistent shape: [-1,16] is inferred from "
            "model e while [-1,8] is inferred from model add_sub",
        ),
    ],
    ids=["max-batch", "bad-input", "unmapped-input", "bad-output", "dtype", "shape"],
)
def test_composing_rule_fires_with_its_text(steps: list[str], model: str, message: str) -> None:
    config = normalize_model_config(ensemble(*steps))
    validate_model_config(config, "e")
    with pytest.raises(InvalidModelConfig) as info:
        check_ensemble_steps(config, composing(add_sub=model))
    assert info.value.message == message


def test_a_decoupled_composing_model_makes_the_ensemble_decoupled() -> None:
    config = normalize_model_config(ensemble(ADD))
    assert check_ensemble_steps(config, composing(add_sub=DECOUPLED)) is True
    assert check_ensemble_steps(config, composing(add_sub=ADD_SUB)) is False


def test_inputs_from_a_decoupled_model_and_the_ensemble_do_not_mix() -> None:
    config = normalize_model_config(ensemble(
        step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT0": "D"}),
        step("plain", {"INPUT0": "D", "INPUT1": "IN"}, {"OUTPUT0": "MID"}),
        step("plain", {"INPUT0": "MID", "INPUT1": "MID"}, {"OUTPUT0": "OUT"}),
    ))
    with pytest.raises(InvalidModelConfig) as info:
        check_ensemble_steps(config, composing(add_sub=DECOUPLED, plain=ADD_SUB))
    assert info.value.message == (
        "in ensemble e, step of model 'plain' receives inputs originated from different "
        "decoupled models"
    )


def test_shape_mismatch_between_two_steps_names_both_models() -> None:
    config = ensemble(
        step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT0": "MID"}),
        step("narrow", {"INPUT0": "MID", "INPUT1": "MID"}, {"OUTPUT0": "OUT"}),
    )
    validate_model_config(config, "e")
    models = composing(add_sub=ADD_SUB, narrow=ADD_SUB.replace("dims: [ 16 ]", "dims: [ 4 ]"))
    with pytest.raises(InvalidModelConfig) as info:
        check_ensemble_steps(normalize_model_config(config), models)
    assert info.value.message == (
        "in ensemble e, ensemble tensor MID: inconsistent shape: [-1,16] is inferred from "
        "model add_sub while [-1,4] is inferred from model narrow"
    )


def test_allowed_variations() -> None:
    """Optional inputs may stay unmapped, unmapped outputs are fine, a non-batching model
    whose dims carry the batch dim fits a batching ensemble, -1 matches any size."""
    config = normalize_model_config(
        ensemble(step("add_sub", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}))
    )
    check_ensemble_steps(config, composing(add_sub=OPTIONAL))
    check_ensemble_steps(normalize_model_config(ensemble(ADD)), composing(add_sub=NO_BATCH))
    wild = ADD_SUB.replace("dims: [ 16 ]", "dims: [ -1 ]")
    check_ensemble_steps(normalize_model_config(ensemble(ADD)), composing(add_sub=wild))


def test_circular_dependency_between_ensembles() -> None:
    deps = {"a": ["b"], "b": ["c", "m"], "c": ["a"], "m": []}
    assert circular_dependency("a", deps) == "circular dependency between ensembles: a -> ... -> c -> a"
    assert circular_dependency("m", deps) is None
    assert circular_dependency("s", {"s": ["s"]}) == "circular dependency between ensembles: s -> ... -> s -> s"
