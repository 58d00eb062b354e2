"""ONNX Runtime backend (``backend: "onnxruntime"`` / ``platform: "onnxruntime_onnx"``).

Follows Triton's onnxruntime_backend: one ``InferenceSession`` per model instance;
KIND_CPU uses the CPU execution provider, KIND_GPU the CUDA provider (and the
TensorRT provider when the config's ``gpu_execution_accelerator`` names
``tensorrt``) on the instance's device. Session knobs come from the model config
``parameters``: ``intra_op_thread_count``, ``inter_op_thread_count``,
``execution_mode`` (0 sequential, 1 parallel), any ORT session config entry
(keys starting ``session.``, e.g. ``session.intra_op.allow_spinning``; thread
spinning defaults to off here, unlike plain ORT) and ``optimization.graph.level``.
A batch of requests is gathered into one contiguous input per tensor, run once,
and the outputs are split back along the batch dimension.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import requested_union, split_outputs
from workbench.devices import gpu_count
from workbench.errors import InternalError, InvalidArgument, ModelLoadError

#: ONNX tensor type strings (``session.get_inputs()[i].type``) -> model-config enum names.
ONNX_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")

_DEFAULT_SESSION_ENTRIES = {
    "session.intra_op.allow_spinning": "0",
    "session.inter_op.allow_spinning": "0",
}


class OnnxRuntimeBackend(Backend):
    """Creates :class:`OnnxRuntimeInstance` objects."""

    names = ("onnxruntime",)
    default_model_filename = "model.onnx"

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return OnnxRuntimeInstance(config, version_dir, spec)


class OnnxRuntimeInstance(ModelInstance):
    """One ``onnxruntime.InferenceSession``.

    Raises (at construction):
        ModelLoadError: missing/broken model file, KIND_GPU without a usable GPU, or
            inputs/outputs whose datatypes disagree with the model config.
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> None:
        super().__init__(spec)
        import onnxruntime as ort  # imported here so the engine starts without it

        self._model_name = config.name
        path = version_dir / (config.default_model_filename or "model.onnx")
        if not path.exists():
            raise ModelLoadError(
                f"unable to load model '{config.name}', model file not found: '{path}'"
            )
        options = _session_options(ort, config)
        providers = _providers(ort, config, spec)
        try:
            self._session = ort.InferenceSession(
                str(path), sess_options=options, providers=providers
            )
        except Exception as exc:  # ORT raises its own types for bad graphs
            raise ModelLoadError(
                f"unable to load model '{config.name}': {type(exc).__name__}: "
                f"{_ANSI.sub('', str(exc))}"
            ) from None
        self._string_inputs = _check_io(config, self._session)
        self._all_outputs = [o.name for o in self._session.get_outputs()]

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        names = requested_union(requests, self._all_outputs)
        feed, sizes = self._gather(requests)
        times.mark_input_done()
        try:
            results = self._session.run(names, feed)
        except Exception as exc:  # ORT's own error types; keep the text, drop terminal colours
            raise InternalError(
                f"onnxruntime failed to run model '{self._model_name}': {_ANSI.sub('', str(exc))}"
            ) from None
        times.mark_infer_done()
        outputs = dict(zip(names, (_from_ort(r) for r in results), strict=True))
        return split_outputs(requests, outputs, sizes)

    def _gather(self, requests: Sequence[BackendRequest]) -> tuple[dict, list[int]]:
        if len(requests) == 1:
            feed = dict(requests[0].inputs)
            sizes = [requests[0].batch_size]
        else:
            sizes = [r.batch_size for r in requests]
            feed = {
                name: np.concatenate([r.inputs[name] for r in requests])
                for name in requests[0].inputs
            }
        for name in self._string_inputs.intersection(feed):
            feed[name] = _to_ort_strings(feed[name], name, self._model_name)
        return feed, sizes

    def unload(self) -> None:
        self.__dict__.pop("_session", None)


def _session_options(ort, config: ModelConfig):
    options = ort.SessionOptions()
    # ORT's own logger writes coloured lines straight to stderr, outside the server's log
    # format; its errors reach the client (and our log) as the exception text anyway.
    options.log_severity_level = 4  # FATAL only
    params = {k: v.string_value for k, v in config.parameters.items()}
    if "intra_op_thread_count" in params:
        options.intra_op_num_threads = int(params["intra_op_thread_count"])
    if "inter_op_thread_count" in params:
        options.inter_op_num_threads = int(params["inter_op_thread_count"])
    parallel = params.get("execution_mode", "0") == "1"
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    # ORT's own session config entries ("session.intra_op.allow_spinning", ...) pass through.
    # Spinning is off unless asked for: spinning ORT threads take the cores the server's
    # event loop needs (measured in bench/RESULTS.md).
    entries = {**_DEFAULT_SESSION_ENTRIES, **{k: v for k, v in params.items() if k.startswith("session.")}}
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    level = config.optimization.graph.level
    options.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return options


def _providers(ort, config: ModelConfig, spec: InstanceSpec) -> list:
    if spec.kind != "KIND_GPU":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if gpu_count() == 0 or "CUDAExecutionProvider" not in available:
        raise ModelLoadError(
            f"unable to load model '{config.name}': instance group '{spec.group_name}' is "
            f"KIND_GPU but no GPU is usable here (GPUs found: {gpu_count()}, onnxruntime "
            f"providers: {', '.join(available)}); use KIND_CPU or install onnxruntime-gpu"
        )
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    providers: list = []
    if any(a.name == "tensorrt" for a in accelerators) and (
        "TensorrtExecutionProvider" in available
    ):
        providers.append(("TensorrtExecutionProvider", {"device_id": spec.device_id}))
    providers.append(("CUDAExecutionProvider", {"device_id": spec.device_id}))
    return providers + ["CPUExecutionProvider"]


def _check_io(config: ModelConfig, session) -> set[str]:
    """Compare config datatypes with the graph's (Triton's load-time check); return string inputs."""
    from tritonclient.grpc.model_config_pb2 import DataType

    graph_inputs = {i.name: i.type for i in session.get_inputs()}
    graph_outputs = {o.name: o.type for o in session.get_outputs()}
    shapes = {t.name: t.shape for t in (*session.get_inputs(), *session.get_outputs())}
    for kind, entries, graph in (
        ("input", config.input, graph_inputs),
        ("output", config.output, graph_outputs),
    ):
        for entry in entries:
            if entry.name not in graph:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', unexpected {kind} '{entry.name}' "
                    f"in model configuration; model provides {sorted(graph)}"
                )
            expected = DataType.Name(entry.data_type)
            provided = ONNX_TO_CONFIG.get(graph[entry.name], graph[entry.name])
            if expected != provided:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{expected} for {kind} '{entry.name}', model provides {provided}"
                )
            _check_dims(config, entry, shapes[entry.name])
    return {name for name, t in graph_inputs.items() if t == "tensor(string)"}


def _check_dims(config: ModelConfig, entry, graph_shape: list) -> None:
    """Triton's load-time shape check (``CompareDimsSupported``): the rank must match, and
    every dim that both the config (``reshape`` when given, else ``dims``) and the graph fix
    must be equal. Variable dims (-1 in the config, symbolic in the graph) match anything;
    the batch dim is not compared.

    Raises:
        ModelLoadError: the config's shape cannot fit the graph's.
    """
    dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
    batching = config.max_batch_size > 0
    full = ([-1] if batching else []) + [int(d) for d in dims]
    model = [d if isinstance(d, int) and d >= 0 else -1 for d in graph_shape]
    fixed_differ = any(c != -1 and m != -1 and c != m for c, m in zip(full[batching:], model[batching:]))
    if len(full) != len(model) or fixed_differ:
        shown = ("an initial batch dimension because max_batch_size > 0 followed by the explicit "
                 "tensor shape, making complete shape " if batching else "shape ")
        raise ModelLoadError(
            f"unable to load model '{config.name}': model '{config.name}', tensor '{entry.name}': "
            f"the model expects {len(model)} dimensions (shape {_dims(model)}) but the model "
            f"configuration specifies {len(full)} dimensions ({shown}{_dims(full)})"
        )


def _dims(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _to_ort_strings(array: np.ndarray, name: str, model: str) -> np.ndarray:
    try:
        return np.vectorize(_decode_utf8, otypes=[object])(array)
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"input '{name}' for model '{model}' holds bytes that are not valid UTF-8; "
            "ONNX Runtime string tensors must be UTF-8"
        ) from None


def _decode_utf8(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _from_ort(result: np.ndarray) -> np.ndarray:
    if result.dtype == np.object_ or result.dtype.kind == "U":
        return np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(result)
    return result
