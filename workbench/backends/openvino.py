"""OpenVINO backend (``backend: "openvino"``), on CPU with the ``openvino`` package.

Follows Triton's openvino_backend: an OpenVINO IR (``model.xml`` + ``model.bin``) or any file
OpenVINO reads (``default_model_filename: "model.onnx"``); one compiled model and one infer
request per instance; KIND_CPU only (KIND_GPU fails the load, as Triton's). ``openvino`` is
imported on the first load; without it the load says what to install.

Config ``parameters`` (Triton's names, string values): ``NUM_STREAMS``
(``CPU_THROUGHPUT_STREAMS``), ``INFERENCE_NUM_THREADS`` (``CPU_THREADS_NUM``),
``PERFORMANCE_HINT``, ``INFERENCE_PRECISION_HINT``, ``ENABLE_CPU_PINNING``,
``COMPILATION_NUM_THREADS``, ``CACHE_DIR`` go to ``Core.compile_model`` (a refused value fails
the load with OpenVINO's text); ``SKIP_OV_DYNAMIC_BATCHSIZE: YES`` keeps the model's own batch
dimension (else, with ``max_batch_size > 0``, it is made dynamic); ``ENABLE_BATCH_PADDING``,
``RESHAPE_IO_LAYERS`` accepted and ignored.

Inputs/outputs are checked against the config at load (names, datatypes, rank, fixed dims). A
batch is concatenated, run once and split back (:mod:`workbench.backends.batching`); ragged
batching as the onnxruntime backend's (beyond Triton's openvino_backend). Docs:
docs/backends.md, the **OpenVINO** item."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import gather_inputs, requested_union, split_outputs
from workbench.backends.ragged import check_ragged_input
from workbench.common.errors import InternalError, ModelLoadError
from workbench.common.frameworks import import_framework
from workbench.config.batch_io import BatchLayout, batch_layout

#: OpenVINO element type names (``Type.get_type_name()``) -> model-config enum names.
OV_TO_CONFIG = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
    "bf16": "TYPE_BF16",
    "string": "TYPE_STRING",
}

#: config parameter -> OpenVINO property (older Triton names map onto the current ones).
OV_PROPERTIES = {
    "NUM_STREAMS": "NUM_STREAMS",
    "CPU_THROUGHPUT_STREAMS": "NUM_STREAMS",
    "INFERENCE_NUM_THREADS": "INFERENCE_NUM_THREADS",
    "CPU_THREADS_NUM": "INFERENCE_NUM_THREADS",
    "PERFORMANCE_HINT": "PERFORMANCE_HINT",
    "INFERENCE_PRECISION_HINT": "INFERENCE_PRECISION_HINT",
    "ENABLE_CPU_PINNING": "ENABLE_CPU_PINNING",
    "COMPILATION_NUM_THREADS": "COMPILATION_NUM_THREADS",
    "CACHE_DIR": "CACHE_DIR",
}


def compile_properties(config: ModelConfig) -> dict[str, str]:
    """The OpenVINO properties the config's ``parameters`` ask for (see the module doc)."""
    params = {k: v.string_value for k, v in config.parameters.items()}
    return {OV_PROPERTIES[k]: v for k, v in params.items() if k in OV_PROPERTIES}


class OpenVinoBackend(Backend):
    """Creates :class:`OpenVinoInstance` objects."""

    framework_modules = ("openvino",)

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return OpenVinoInstance(config, version_dir, spec)


class OpenVinoInstance(ModelInstance):
    """One OpenVINO compiled model and infer request on CPU.

    Raises (at construction):
        ModelLoadError: ``openvino`` not installed, KIND_GPU, missing or unreadable model
            file, a property OpenVINO refuses, or inputs/outputs that disagree with the config.
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> None:
        super().__init__(spec)
        name = config.name
        try:
            ov = import_framework("openvino")
        except ImportError:
            raise ModelLoadError(
                f"unable to load model '{name}': the openvino backend needs the 'openvino' "
                "package; install it with `pip install openvino` (or workbench[openvino])"
            ) from None
        if spec.kind == "KIND_GPU":
            raise ModelLoadError(
                f"unable to load model '{name}': instance group '{spec.group_name}' is "
                "KIND_GPU but the openvino backend runs on CPU only; use KIND_CPU"
            )
        self._model_name = name
        path = version_dir / (config.default_model_filename or "model.xml")
        if not path.exists():
            raise ModelLoadError(f"unable to load model '{name}', model file not found: '{path}'")
        params = {k: v.string_value for k, v in config.parameters.items()}
        core = ov.Core()
        try:
            model = core.read_model(str(path))
            if config.max_batch_size > 0 and params.get("SKIP_OV_DYNAMIC_BATCHSIZE", "NO") != "YES":
                _dynamic_batch(ov, model)
            self._layout = batch_layout(config)
            _check_io(config, model, self._layout)
            self._compiled = core.compile_model(model, "CPU", compile_properties(config))
        except ModelLoadError:
            raise
        except RuntimeError as exc:  # OpenVINO raises RuntimeError with its own text
            raise ModelLoadError(
                f"unable to load model '{name}': {type(exc).__name__}: {exc}"
            ) from None
        self._request = self._compiled.create_infer_request()
        self._outputs = {o.get_any_name(): o for o in self._compiled.outputs}

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        names = requested_union(requests, list(self._outputs))
        feed, sizes = gather_inputs(requests, model=self._model_name, layout=self._layout)
        times.mark_input_done()
        try:
            results = self._request.infer(feed)
        except (RuntimeError, ValueError, TypeError) as exc:  # OpenVINO's checks; the feed's conversion
            raise InternalError(
                f"openvino failed to run model '{self._model_name}': {exc}"
            ) from None
        # copy: the request's output tensors are reused by the next infer
        outputs = {n: np.array(results[self._outputs[n]], copy=True) for n in names}
        times.mark_infer_done()
        return split_outputs(requests, outputs, sizes, self._layout)

    def unload(self) -> None:
        self.__dict__.pop("_request", None)
        self.__dict__.pop("_compiled", None)


def _dynamic_batch(ov, model) -> None:
    """Make the first dimension of every input dynamic (Triton's default for batching models)."""
    shapes = {}
    for port in model.inputs:
        shape = port.get_partial_shape()
        if shape.rank.is_static and len(shape) > 0 and shape[0].is_static:
            shape[0] = ov.Dimension(-1)
            shapes[port.get_any_name()] = shape
    if shapes:
        model.reshape(shapes)


def _check_io(config: ModelConfig, model, layout: BatchLayout) -> None:
    """Names, datatypes and shapes of the config against the model's (as Triton checks).

    Ragged batching (``layout``) is checked as the onnxruntime backend checks it: a ragged
    input must be a model input of shape ``[-1]`` (after the batch dim is made dynamic) and not
    optional, a ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output's dims are not compared, and every
    batch input target must be a model input of the batch input's datatype.

    Raises:
        ModelLoadError: a config tensor the model lacks, another datatype, or a shape that
            cannot fit (rank, or a fixed dim that differs; the batch dim is not compared).
    """
    for kind, entries, ports in (("input", config.input, model.inputs),
                                 ("output", config.output, model.outputs)):
        by_name = {name: p for p in ports for name in p.get_names()}
        for entry in entries:
            port = by_name.get(entry.name)
            if port is None:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', unexpected {kind} '{entry.name}' "
                    f"in model configuration; model provides {sorted(p.get_any_name() for p in ports)}"
                )
            ov_type = port.get_element_type().get_type_name()
            provided = OV_TO_CONFIG.get(ov_type, ov_type)
            expected = DataType.Name(entry.data_type)
            if expected != provided:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{expected} for {kind} '{entry.name}', model provides {provided}"
                )
            shape = port.get_partial_shape()
            model_dims = [d.get_length() if d.is_static else -1 for d in shape]
            if kind == "input" and entry.name in layout.ragged:
                check_ragged_input(config.name, entry.name, entry.optional, model_dims)
                continue
            if kind == "output" and entry.name in layout.outputs:
                continue  # split by its source input's shapes, as Triton's backends skip it
            dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            batching = config.max_batch_size > 0
            full = ([-1] if batching else []) + [int(d) for d in dims]
            differ = any(c != -1 and m != -1 and c != m  # the lengths are compared next
                         for c, m in zip(full[batching:], model_dims[batching:], strict=False))
            if len(full) != len(model_dims) or differ:
                raise ModelLoadError(
                    f"unable to load model '{config.name}': tensor '{entry.name}': the model "
                    f"expects shape {model_dims} but the model configuration specifies "
                    f"{full}" + (" (batch dimension first because max_batch_size > 0)"
                                 if batching else "")
                )
    _check_batch_inputs(config, model, layout)


def _check_batch_inputs(config: ModelConfig, model, layout: BatchLayout) -> None:
    """Every batch input target is a model input of the batch input's datatype.

    Raises:
        ModelLoadError: a target the model lacks, or of another datatype.
    """
    by_name = {name: p for p in model.inputs for name in p.get_names()}
    for spec in layout.inputs:
        for target in spec.targets:
            port = by_name.get(target)
            if port is None:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', unexpected batch input '{target}' in "
                    f"model configuration; model provides {sorted(p.get_any_name() for p in model.inputs)}"
                )
            ov_type = port.get_element_type().get_type_name()
            provided = OV_TO_CONFIG.get(ov_type, ov_type)
            if provided != spec.data_type:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{spec.data_type} for batch input '{target}', model provides {provided}"
                )
