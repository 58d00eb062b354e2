"""Ensemble model repositories for tests: real ONNX composing models (served by the real
onnxruntime backend) wired into ensembles, good and broken.

All tensors are FP32. ``a``, ``b`` are the ensemble inputs ``IN0``, ``IN1``.
"""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto

from workbench.testing.fake_backend import write_fake_model
from workbench.testing.models import (
    ACCUMULATOR_CONFIG,
    ADD_SUB_CONFIG,
    accumulator_graph,
    add_sub_graph,
    identity_graph,
    write_model,
)

#: composing models batch across ensemble requests (a short queue delay helps batches form)
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"

IDENTITY16_CONFIG = """
name: "identity16"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

#: (name, data type, dims) of an ensemble input or output
IO = tuple[str, str, list[int]]
#: (model, input_map, output_map[, model_version]) of an ensemble step
Step = tuple


def ensemble_config(
    name: str, inputs: list[IO], outputs: list[IO], steps: list[Step], max_batch_size: int = 8
) -> str:
    """The ``config.pbtxt`` of an ensemble; steps are ``(model, input_map, output_map)`` or
    ``(model, input_map, output_map, model_version)`` (default -1)."""

    def io(entries: list[IO]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: {t} dims: {list(d)} }}' for n, t, d in entries)

    def step(entry: Step) -> str:
        model, in_map, out_map, *version = entry
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in in_map.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in out_map.items()]
        return f'{{ model_name: "{model}" model_version: {version[0] if version else -1} {" ".join(maps)} }}'

    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {io(inputs)} ]\noutput [ {io(outputs)} ]\n"
        f"ensemble_scheduling {{ step [ {', '.join(step(s) for s in steps)} ] }}\n"
    )


def write_ensemble(repo: Path, name: str, config: str) -> Path:
    """``repo/name/config.pbtxt`` and the empty version folder ``1`` an ensemble needs."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    return folder


F16 = [16]
PAIR = [("IN0", "TYPE_FP32", F16), ("IN1", "TYPE_FP32", F16)]
ADD = {"INPUT0": "IN0", "INPUT1": "IN1"}


def build_ensemble_repository(repo: Path) -> Path:
    """Composing models and good ensembles.

    - ``add_sub``: FP32 [-1,16] x2 -> sum, difference; dynamic batching, 2 instances.
    - ``identity16``: FP32 [-1,16] identity; dynamic batching, 2 instances.
    - ``add_sub_any``: add_sub over [-1,-1] (auto-completed); unequal widths fail in ORT.
    - ``ens_chain``: add_sub then identity16: ``SUM`` = a + b (through identity16),
      ``DIFF`` = a - b (straight from add_sub).
    - ``ens_diamond``: add_sub -> (identity16 on the sum || identity16 on the difference)
      -> add_sub: ``OUT0`` = 2a, ``OUT1`` = 2b; the two middle steps are independent.
    - ``ens_nested``: an ensemble of ensembles: ens_diamond then ens_chain: ``SUM`` =
      2a + 2b, ``DIFF`` = 2a - 2b.
    - ``ens_any``: add_sub_any on [-1] inputs (``OUT`` = a + b), max_batch_size 4: a
      request with unequal widths fails in its step.
    - ``accumulator`` (sequence batcher, running sum of ``INPUT`` [1]) and ``ens_sequence``:
      IN [1] -> accumulator -> OUT, to see sequence flags reach the step.
    - ``ens_cached``: ens_chain with ``response_cache { enable: true }``.
    """
    write_model(repo, "add_sub", ADD_SUB_CONFIG + BATCHING, add_sub_graph())
    write_model(repo, "identity16", IDENTITY16_CONFIG + BATCHING, identity_graph(TensorProto.FLOAT, ["batch", 16]))
    write_model(repo, "add_sub_any", None, add_sub_graph(width="n"))
    chain = ensemble_config(
        "ens_chain", PAIR, [("SUM", "TYPE_FP32", F16), ("DIFF", "TYPE_FP32", F16)],
        [
            ("add_sub", ADD, {"OUTPUT0": "sum", "OUTPUT1": "DIFF"}),
            ("identity16", {"INPUT0": "sum"}, {"OUTPUT0": "SUM"}),
        ],
    )
    write_ensemble(repo, "ens_chain", chain)
    diamond = ensemble_config(
        "ens_diamond", PAIR, [("OUT0", "TYPE_FP32", F16), ("OUT1", "TYPE_FP32", F16)],
        [
            ("add_sub", ADD, {"OUTPUT0": "s", "OUTPUT1": "d"}),
            ("identity16", {"INPUT0": "s"}, {"OUTPUT0": "s2"}),
            ("identity16", {"INPUT0": "d"}, {"OUTPUT0": "d2"}),
            ("add_sub", {"INPUT0": "s2", "INPUT1": "d2"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"}),
        ],
    )
    write_ensemble(repo, "ens_diamond", diamond)
    nested = ensemble_config(
        "ens_nested", PAIR, [("SUM", "TYPE_FP32", F16), ("DIFF", "TYPE_FP32", F16)],
        [
            ("ens_diamond", {"IN0": "IN0", "IN1": "IN1"}, {"OUT0": "x", "OUT1": "y"}),
            ("ens_chain", {"IN0": "x", "IN1": "y"}, {"SUM": "SUM", "DIFF": "DIFF"}),
        ],
    )
    write_ensemble(repo, "ens_nested", nested)
    anywidth = ensemble_config(
        "ens_any",
        [("IN0", "TYPE_FP32", [-1]), ("IN1", "TYPE_FP32", [-1])],
        [("OUT", "TYPE_FP32", [-1])],
        [("add_sub_any", ADD, {"OUTPUT0": "OUT"})],
        max_batch_size=4,
    )
    write_ensemble(repo, "ens_any", anywidth)
    write_model(repo, "accumulator", ACCUMULATOR_CONFIG, accumulator_graph())
    sequence = ensemble_config(
        "ens_sequence", [("IN", "TYPE_FP32", [1])], [("OUT", "TYPE_FP32", [1])],
        [("accumulator", {"INPUT": "IN"}, {"OUTPUT": "OUT"})],
    )
    write_ensemble(repo, "ens_sequence", sequence)
    cached = chain.replace('"ens_chain"', '"ens_cached"') + "response_cache { enable: true }\n"
    write_ensemble(repo, "ens_cached", cached)
    return repo


def _add_step(out: str = "OUT") -> Step:
    return ("add_sub", ADD, {"OUTPUT0": out})


OUT = [("OUT", "TYPE_FP32", F16)]

#: broken ensemble -> its config (on top of :func:`build_ensemble_repository`)
_BROKEN: dict[str, str] = {
    "bad_unknown_model": ensemble_config(
        "bad_unknown_model", PAIR, OUT, [("no_such_model", ADD, {"OUTPUT0": "OUT"})]
    ),
    "bad_cycle_a": ensemble_config("bad_cycle_a", PAIR, OUT, [("bad_cycle_b", ADD, {"OUT": "OUT"})]),
    "bad_cycle_b": ensemble_config("bad_cycle_b", PAIR, OUT, [("bad_cycle_a", ADD, {"OUT": "OUT"})]),
    "bad_step_cycle": ensemble_config(
        "bad_step_cycle", PAIR, OUT,
        [
            ("add_sub", {"INPUT0": "IN0", "INPUT1": "back"}, {"OUTPUT0": "fwd"}),
            ("identity16", {"INPUT0": "fwd"}, {"OUTPUT0": "back"}),
            ("add_sub", {"INPUT0": "fwd", "INPUT1": "IN1"}, {"OUTPUT0": "OUT"}),
        ],
    ),
    "bad_never_produced": ensemble_config(
        "bad_never_produced", PAIR, OUT,
        [("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1", "X": "GHOST"}, {"OUTPUT0": "OUT"})]
    ),
    "bad_unused_input": ensemble_config(
        "bad_unused_input", [*PAIR, ("IN2", "TYPE_FP32", F16)], OUT, [_add_step()]
    ),
    "bad_unproduced_output": ensemble_config(
        "bad_unproduced_output", PAIR, [*OUT, ("OUT2", "TYPE_FP32", F16)], [_add_step()]
    ),
    "bad_two_producers": ensemble_config(
        "bad_two_producers", PAIR, OUT, [_add_step(), ("identity16", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})]
    ),
    "bad_unused_step_output": ensemble_config(
        "bad_unused_step_output", PAIR, OUT, [("add_sub", ADD, {"OUTPUT0": "OUT", "OUTPUT1": "spare"})]
    ),
    "bad_step_input": ensemble_config(
        "bad_step_input", PAIR, OUT, [("add_sub", {**ADD, "INPUT7": "IN0"}, {"OUTPUT0": "OUT"})]
    ),
    "bad_step_output": ensemble_config(
        "bad_step_output", PAIR, OUT, [("add_sub", ADD, {"OUTPUT7": "OUT"})]
    ),
    "bad_dtype": ensemble_config(
        "bad_dtype", [("IN0", "TYPE_INT32", F16), PAIR[1]], OUT, [_add_step()]
    ),
    "bad_shape": ensemble_config(
        "bad_shape", [("IN0", "TYPE_FP32", [8]), PAIR[1]], OUT, [_add_step()]
    ),
    "bad_batch": ensemble_config("bad_batch", PAIR, OUT, [_add_step()], max_batch_size=16),
    "bad_version": ensemble_config(
        "bad_version", PAIR, OUT, [("add_sub", ADD, {"OUTPUT0": "OUT"}, 7)]
    ),
    "bad_composing_config": ensemble_config(
        "bad_composing_config", PAIR, OUT, [("invalid_config", ADD, {"OUTPUT0": "OUT"})]
    ),
    "bad_composing_load": ensemble_config(
        "bad_composing_load", PAIR, OUT, [("unloadable", ADD, {"OUTPUT0": "OUT"})]
    ),
}

#: broken ensemble -> the exact reason it is UNAVAILABLE with (Triton's texts)
BROKEN_ENSEMBLE_REASONS: dict[str, str] = {
    "bad_unknown_model": "ensemble bad_unknown_model contains models that are not available or ambiguous: "
    "no_such_model",
    "bad_cycle_a": "circular dependency between ensembles: bad_cycle_a -> ... -> bad_cycle_b -> bad_cycle_a",
    "bad_cycle_b": "circular dependency between ensembles: bad_cycle_b -> ... -> bad_cycle_a -> bad_cycle_b",
    "bad_step_cycle": "output 'OUT' for ensemble 'bad_step_cycle' is not written: at least one of its depending "
    "tensors, 'back', is not connected; its steps form a cycle: step 0 'add_sub' -> step 1 'identity16' "
    "-> step 0 'add_sub'",
    "bad_never_produced": "output 'OUT' for ensemble 'bad_never_produced' is not written: at least one of its "
    "depending tensors, 'GHOST', is not connected",
    # Triton's text has one quote too few: "for ensemble E' is not used"
    "bad_unused_input": "ensemble input 'IN2' for ensemble bad_unused_input' is not used",
    "bad_unproduced_output": "ensemble output 'OUT2' for ensemble bad_unproduced_output' is not used",
    "bad_two_producers": "ensemble tensor 'OUT' can appear in an output map only once for ensemble "
    "'bad_two_producers' step 1",
    "bad_unused_step_output": "ensemble tensor 'spare' is unused in ensemble 'bad_unused_step_output'",
    "bad_step_input": "in ensemble bad_step_input, ensemble tensor IN0 is mapping to non-existing input INPUT7 "
    "in model add_sub",
    "bad_step_output": "in ensemble bad_step_output, ensemble tensor OUT is mapped from non-existing output "
    "OUTPUT7 in model add_sub",
    "bad_dtype": "in ensemble bad_dtype, ensemble tensor IN0: inconsistent data type: TYPE_INT32 is inferred "
    "from model bad_dtype while TYPE_FP32 is inferred from model add_sub",
    "bad_shape": "in ensemble bad_shape, ensemble tensor IN0: inconsistent shape: [-1,8] is inferred from "
    "model bad_shape while [-1,16] is inferred from model add_sub",
    "bad_batch": "ensemble bad_batch allows maximum batch size 16, but it contains model add_sub which only "
    "allows maximum batch size to be 8",
    "bad_version": "ensemble 'bad_version' depends on 'add_sub' whose required version 7 is not loaded.",
    "bad_composing_config": "ensemble 'bad_composing_config' depends on 'invalid_config' which is not valid. "
    "Model 'invalid_config' failed with error: 'max_batch_size' must be non-negative value for invalid_config",
    "bad_composing_load": "ensemble 'bad_composing_load' depends on 'unloadable' which has no loaded version. "
    "Model 'unloadable' loading failed with error: version 1 is at UNAVAILABLE state: ",
}


def add_broken_ensembles(repo: Path) -> Path:
    """Add every ensemble of :data:`BROKEN_ENSEMBLE_REASONS` (each breaks one rule), and
    the two broken composing models they need: ``invalid_config`` (``max_batch_size: -1``)
    and ``unloadable`` (a valid config whose model.onnx is not ONNX)."""
    for name, config in _BROKEN.items():
        write_ensemble(repo, name, config)
    invalid = ADD_SUB_CONFIG.replace('"add_sub"', '"invalid_config"').replace("max_batch_size: 8", "max_batch_size: -1")
    write_model(repo, "invalid_config", invalid, add_sub_graph())
    unloadable = repo / "unloadable"
    (unloadable / "1").mkdir(parents=True, exist_ok=True)
    (unloadable / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace('"add_sub"', '"unloadable"'))
    (unloadable / "1" / "model.onnx").write_bytes(b"this is not an onnx file")
    return repo


FAKE_PAIR_ENSEMBLE = ensemble_config(
    "ens_fake_pair",
    [("IN", "TYPE_FP32", [1])],
    [("A", "TYPE_FP32", [1]), ("B", "TYPE_FP32", [1])],
    [
        ("fake_a", {"INPUT0": "IN"}, {"OUTPUT0": "A"}),
        ("fake_b", {"INPUT0": "IN"}, {"OUTPUT0": "B"}),
    ],
    max_batch_size=4,
)


FAKE_CHAIN_ENSEMBLE = ensemble_config(
    "ens_fake_chain",
    [("IN", "TYPE_FP32", [1])],
    [("OUT", "TYPE_FP32", [1])],
    [
        ("fake_a", {"INPUT0": "IN"}, {"OUTPUT0": "mid"}),
        ("fake_b", {"INPUT0": "mid"}, {"OUTPUT0": "OUT"}),
    ],
    max_batch_size=4,
)


def build_fake_ensemble_repository(repo: Path) -> Path:
    """Ensembles over the fake backend (register ``FakeBackend`` as "fake" first), whose
    models ``fake_a`` and ``fake_b`` have one instance each:

    - ``ens_fake_pair``: two independent steps, IN -> A (fake_a), IN -> B (fake_b). With
      ``BEHAVIOUR.barrier = threading.Barrier(2)`` a request completes only when both
      steps execute at the same time.
    - ``ens_fake_chain``: IN -> fake_a -> fake_b -> OUT (``BEHAVIOUR.gate`` holds step 1).
    """
    write_fake_model(repo, "fake_a", count=1)
    write_fake_model(repo, "fake_b", count=1)
    write_ensemble(repo, "ens_fake_pair", FAKE_PAIR_ENSEMBLE)
    write_ensemble(repo, "ens_fake_chain", FAKE_CHAIN_ENSEMBLE)
    return repo


__all__ = [
    "BROKEN_ENSEMBLE_REASONS",
    "FAKE_CHAIN_ENSEMBLE",
    "FAKE_PAIR_ENSEMBLE",
    "add_broken_ensembles",
    "build_ensemble_repository",
    "build_fake_ensemble_repository",
    "ensemble_config",
    "write_ensemble",
]
