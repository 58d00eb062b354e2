"""Validation of ``model_warmup`` (Triton's ``ModelWarmup``) against the model's inputs.

Part of :func:`workbench.config.validate.validate_model_config`, so a bad warmup sample
fails the model's load with its reason before any instance is created. Triton checks
the same things later, when it builds the warmup requests (core
``backend_model_instance.cc``: ``GenerateWarmupData``) and normalizes them as
requests; its texts are kept where it has one, prefixed with the sample's name:

- every input sets one of ``zero_data`` / ``random_data`` / ``input_data_file``:
  "warmup setting expects input 'X' to have input_data_type set";
- dims are all given: "warmup setting expects all variable-size dimensions are
  specified for input 'X'";
- a key names a model input or a sequence batcher control input: "unexpected inference
  input 'X' for model 'm'"; every required model input is given;
- a model input's data type and dims (batch dimension excluded, ``-1`` in the config
  matches any size) are the config's: "inference input 'X' data-type is 'FP32', but
  model 'm' expects 'INT32'", "unexpected shape for input 'X' for model 'm'. Expected
  [16], got [8]";
- ``input_data_file`` is a plain file name inside the model's ``warmup/`` folder (no
  absolute path, no ``..``; Triton joins it unchecked);
- beyond Triton: ``batch_size`` is at most ``max_batch_size`` (1 for a model that does
  not batch), since the sample's requests run as one execution.

The data itself (file sizes, BYTES elements) is checked when the samples are built
(``workbench.engine.models.warmup``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig
from workbench.config.paths import stays_inside

#: wire names for messages (``TYPE_STRING`` is ``BYTES``), as request validation words them.
_WIRE = {v: ("BYTES" if k == "TYPE_STRING" else k.removeprefix("TYPE_"))
         for k, v in mc.DataType.items()}


def check_model_warmup(config: mc.ModelConfig) -> None:
    """Check every ``model_warmup`` sample of ``config`` (normalized: inputs complete).

    Raises:
        InvalidModelConfig: "model_warmup sample '<name>' of model '<m>': <reason>" for the
            first rule broken (see the module docstring).
    """
    if not config.model_warmup:
        return
    m = config.name
    inputs = {i.name: i for i in config.input}
    controls = {c.name for c in config.sequence_batching.control_input}
    controls |= {s.input_name for s in config.sequence_batching.state}
    limit = max(1, int(config.max_batch_size))
    for sample in config.model_warmup:

        def fail(reason: str, sample: mc.ModelWarmup = sample) -> NoReturn:
            raise InvalidModelConfig(f"model_warmup sample '{sample.name}' of model '{m}': {reason}")

        if sample.batch_size > limit:
            what = f"max_batch_size {config.max_batch_size}" if config.max_batch_size else \
                "1 for a model with max_batch_size 0"
            fail(f"batch_size {sample.batch_size} must be <= {what}")
        for key, value in sample.inputs.items():
            if value.WhichOneof("input_data_type") is None:
                fail(f"warmup setting expects input '{key}' to have input_data_type set")
            if any(d < 0 for d in value.dims):
                fail(f"warmup setting expects all variable-size dimensions are specified for "
                     f"input '{key}'")
            if value.WhichOneof("input_data_type") == "input_data_file":
                _check_file_name(value.input_data_file, key, fail)
            if key in inputs:
                _check_against_input(value, inputs[key], m, fail)
            elif key not in controls:
                fail(f"unexpected inference input '{key}' for model '{m}'")
        missing = [n for n, i in inputs.items() if not i.optional and n not in sample.inputs]
        if missing and sample.batch_size > 0:
            fail(f"missing required input(s) {_names(missing)}: a warmup sample must give every "
                 "non-optional input")


def _check_against_input(value: mc.ModelWarmup.Input, spec: mc.ModelInput, m: str,
                         fail: Callable[[str], NoReturn]) -> None:
    if value.data_type != spec.data_type:
        fail(f"inference input '{spec.name}' data-type is '{_WIRE.get(value.data_type, '?')}', "
             f"but model '{m}' expects '{_WIRE.get(spec.data_type, '?')}'")
    want, got = list(spec.dims), list(value.dims)
    if len(want) != len(got) or any(w != -1 and w != g for w, g in zip(want, got, strict=True)):
        fail(f"unexpected shape for input '{spec.name}' for model '{m}'. Expected "
             f"{_dims(want)}, got {_dims(got)} (warmup dims exclude the batch dimension)")


def _check_file_name(name: str, key: str, fail: Callable[[str], NoReturn]) -> None:
    if not stays_inside(name):
        fail(f"input_data_file '{name}' of input '{key}' must be a file name inside the "
             "model's 'warmup' folder (no absolute path, '.' or '..')")


def _dims(dims: list[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


__all__ = ["check_model_warmup"]
