"""ONNX Runtime backend (``backend: "onnxruntime"`` / ``platform: "onnxruntime_onnx"``).

Follows Triton's onnxruntime_backend: one ``InferenceSession`` per model instance;
KIND_CPU uses the CPU execution provider, KIND_GPU the CUDA provider on the instance's
device; ``optimization.execution_accelerators`` add TensorRT (GPU) or OpenVINO (CPU)
providers, and ``parameters`` / ``optimization.graph.level`` tune the session: the whole
mapping, with Triton's names and errors, is in :mod:`workbench.backends.ort_options`.
A batch of requests is gathered into one contiguous input per tensor, run once,
and the outputs are split back along the batch dimension; with Triton's ragged batching a
ragged input goes in flat (graph shape ``[-1]``), batch inputs are added and scatter outputs
split by their source input's shapes (:mod:`workbench.backends.batching`).
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
from workbench.backends.batching import gather_inputs, requested_union, split_outputs
from workbench.backends.ort_options import OrtSessionPlan, check_providers_started, session_plan
from workbench.backends.ragged import check_ragged_input
from workbench.common.errors import InternalError, InvalidArgument, ModelLoadError
from workbench.common.frameworks import import_framework
from workbench.config.batch_io import BatchLayout, batch_layout
from workbench.gpu.devices import gpu_count

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

class OnnxRuntimeBackend(Backend):
    """Creates :class:`OnnxRuntimeInstance` objects."""

    framework_modules = ("onnxruntime",)

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
        ort = import_framework("onnxruntime")  # imported here so the engine starts without it

        self._model_name = config.name
        path = version_dir / (config.default_model_filename or "model.onnx")
        if not path.exists():
            raise ModelLoadError(
                f"unable to load model '{config.name}', model file not found: '{path}'"
            )
        plan = _plan(ort, config, spec)
        options = _session_options(ort, plan)
        providers = [(name, opts) if opts else name for name, opts in plan.providers]
        try:
            self._session = ort.InferenceSession(
                str(path), sess_options=options, providers=providers
            )
        except Exception as exc:  # noqa: BLE001  # ORT's exception types share no base but Exception
            raise ModelLoadError(
                f"unable to load model '{config.name}': {type(exc).__name__}: "
                f"{_ANSI.sub('', str(exc))}"
            ) from None
        check_providers_started(config.name, plan, self._session.get_providers())
        self._layout = batch_layout(config)
        self._string_inputs, self._scalars = _check_io(config, self._session, self._layout)
        self._batching = config.max_batch_size > 0
        self._all_outputs = [o.name for o in self._session.get_outputs()]

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        names = requested_union(requests, self._all_outputs)
        feed, sizes = self._gather(requests)
        times.mark_input_done()
        try:
            results = self._session.run(names, feed)
        except Exception as exc:  # noqa: BLE001  # ORT's error types share no base but Exception; keep the text, drop terminal colours
            raise InternalError(
                f"onnxruntime failed to run model '{self._model_name}': {_ANSI.sub('', str(exc))}"
            ) from None
        times.mark_infer_done()
        outputs = dict(zip(names, (_from_ort(r) for r in results), strict=True))
        for name in self._scalars.keys() & outputs.keys():
            if outputs[name].ndim == 0:  # Triton: a scalar output takes the configured dims
                batch = [sum(sizes)] if self._batching else []
                outputs[name] = outputs[name].reshape(batch + self._scalars[name])
        return split_outputs(requests, outputs, sizes, self._layout)

    def _gather(self, requests: Sequence[BackendRequest]) -> tuple[dict, list[int]]:
        feed, sizes = gather_inputs(requests, model=self._model_name, layout=self._layout)
        for name in self._string_inputs.intersection(feed):
            feed[name] = _to_ort_strings(feed[name], name, self._model_name)
        for name in self._scalars.keys() & feed.keys():
            feed[name] = _to_scalar(feed[name], name, self._model_name)
        return feed, sizes

    def unload(self) -> None:
        self.__dict__.pop("_session", None)


def _session_options(ort, plan: OrtSessionPlan):
    """``onnxruntime.SessionOptions`` from a :func:`session_plan` (see ort_options)."""
    options = ort.SessionOptions()
    # ORT's own logger writes coloured lines straight to stderr, outside the server's log
    # format; its errors reach the client (and our log) as the exception text anyway.
    options.log_severity_level = 4  # FATAL only
    if plan.intra_op_threads > 0:
        options.intra_op_num_threads = plan.intra_op_threads
    if plan.inter_op_threads > 0:
        options.inter_op_num_threads = plan.inter_op_threads
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if plan.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    if plan.mem_arena is not None:
        options.enable_cpu_mem_arena = plan.mem_arena
    if plan.mem_pattern is not None:
        options.enable_mem_pattern = plan.mem_pattern
    # Thread spinning: on only with spare cores, unless the config says (ort_options,
    # default_intra_op_spinning; measured in bench/RESULTS.md).
    for key, value in plan.config_entries.items():
        options.add_session_config_entry(key, value)
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, plan.graph_level)
    return options


def _plan(ort, config: ModelConfig, spec: InstanceSpec) -> OrtSessionPlan:
    available = ort.get_available_providers()
    if spec.kind == "KIND_GPU" and (gpu_count() == 0 or "CUDAExecutionProvider" not in available):
        raise ModelLoadError(
            f"unable to load model '{config.name}': instance group '{spec.group_name}' is "
            f"KIND_GPU but no GPU is usable here (GPUs found: {gpu_count()}, onnxruntime "
            f"providers: {', '.join(available)}); use KIND_CPU or install onnxruntime-gpu"
        )
    kind = "KIND_GPU" if spec.kind == "KIND_GPU" else "KIND_CPU"
    return session_plan(config, kind, spec.device_id, available)


def _check_io(config: ModelConfig, session,
              layout: BatchLayout) -> tuple[set[str], dict[str, list[int]]]:
    """Compare config datatypes and dims with the graph's (Triton's load-time check).

    A ragged input must be a graph input of shape ``[-1]`` and not optional
    (:func:`~workbench.backends.ragged.check_ragged_input`); a batch output target's dims are
    not compared (the model's output is split by its source input's shapes, as Triton's
    onnxruntime backend skips them); a batch input's target must be a graph input of its
    datatype.

    Returns:
        The names of the string inputs, and the scalar (rank-0) graph tensors with their
        configured dims (all 1s, without the batch dim).
    """
    from tritonclient.grpc.model_config_pb2 import DataType

    graph_inputs = {i.name: i.type for i in session.get_inputs()}
    expected = _expected_input_count(config)
    if len(graph_inputs) != expected:
        raise ModelLoadError(f"unable to load model '{config.name}', configuration expects {expected} "
                             f"inputs, model provides {len(graph_inputs)}")
    overridable = list(getattr(session, "get_overridable_initializers", list)())
    graph_inputs.update({i.name: i.type for i in overridable})  # request inputs too, as in Triton
    graph_outputs = {o.name: o.type for o in session.get_outputs()}
    shapes = {t.name: t.shape for t in (*session.get_inputs(), *overridable, *session.get_outputs())}
    scalars: dict[str, list[int]] = {}
    for kind, entries, graph in (
        ("input", config.input, graph_inputs),
        ("output", config.output, graph_outputs),
    ):
        for entry in entries:
            if entry.name not in graph:
                raise ModelLoadError(
                    f"unexpected inference {kind} '{entry.name}', allowed {kind}s are: "
                    f"{', '.join(sorted(graph))}"
                )
            expected = DataType.Name(entry.data_type)
            provided = ONNX_TO_CONFIG.get(graph[entry.name], graph[entry.name])
            if expected != provided:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{expected} for {kind} '{entry.name}', model provides {provided}"
                )
            if kind == "input" and entry.name in layout.ragged:
                check_ragged_input(config.name, entry.name, entry.optional,
                                   [d if isinstance(d, int) and d >= 0 else -1 for d in shapes[entry.name]])
            elif kind == "output" and entry.name in layout.outputs:
                pass  # Triton: "The batch output shape doesn't necessarily match the model"
            elif len(shapes[entry.name]) == 0:
                scalars[entry.name] = _check_scalar_dims(config, entry)
            else:
                _check_dims(config, entry, shapes[entry.name])
    _check_batch_inputs(config, layout, graph_inputs)
    return {name for name, t in graph_inputs.items() if t == "tensor(string)"}, scalars


def _expected_input_count(config: ModelConfig) -> int:
    """The graph inputs a config accounts for, as Triton's onnxruntime backend counts them:
    its inputs less the ``optional`` ones, plus ``batch_input`` entries, one per sequence
    control kind (START, END, READY, CORRID) and one per implicit ``state``."""
    from tritonclient.grpc.model_config_pb2 import ModelSequenceBatching

    kinds = ModelSequenceBatching.Control.Kind
    counted = {kinds.CONTROL_SEQUENCE_START, kinds.CONTROL_SEQUENCE_END, kinds.CONTROL_SEQUENCE_READY,
               kinds.CONTROL_SEQUENCE_CORRID}
    controls = {c.kind for ci in config.sequence_batching.control_input for c in ci.control} & counted
    return (sum(1 for i in config.input if not i.optional) + len(config.batch_input) + len(controls)
            + len(config.sequence_batching.state))


def _check_batch_inputs(config: ModelConfig, layout: BatchLayout, graph_inputs: dict) -> None:
    """Every batch input target is a graph input of the batch input's datatype (Triton counts
    them among the inputs the graph must have; a missing one fails Triton's load too).

    Raises:
        ModelLoadError: a target the graph lacks, or of another datatype.
    """
    for spec in layout.inputs:
        for target in spec.targets:
            if target not in graph_inputs:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', unexpected batch input '{target}' "
                    f"in model configuration; model provides {sorted(graph_inputs)}"
                )
            provided = ONNX_TO_CONFIG.get(graph_inputs[target], graph_inputs[target])
            if provided != spec.data_type:
                raise ModelLoadError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{spec.data_type} for batch input '{target}', model provides {provided}"
                )


def _check_scalar_dims(config: ModelConfig, entry) -> list[int]:
    """A scalar (rank-0) graph tensor: every configured dim (``reshape`` when given, else
    ``dims``; the batch dim is not among them) must be 1, as Triton's onnxruntime backend
    (``ValidateInputs`` / ``ValidateOutputs``). Returns those dims.

    Raises:
        ModelLoadError: a configured dim other than 1 (Triton's text).
    """
    dims = [int(d) for d in (entry.reshape.shape if entry.HasField("reshape") else entry.dims)]
    if any(d != 1 for d in dims):
        raise ModelLoadError(
            f"unable to load model '{config.name}', scalar tensor '{entry.name}', should only "
            "provide 1 in the model configuration when the model doesn't support batching. "
            f"Model configuration provided: {_dims(dims)}."
        )
    return dims


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
    fixed_differ = any(c != -1 and m != -1 and c != m  # the lengths are compared next
                       for c, m in zip(full[batching:], model[batching:], strict=False))
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


def _to_scalar(array: np.ndarray, name: str, model: str) -> np.ndarray:
    """The one element of a request's input for a scalar graph input, as a rank-0 array.

    Raises:
        InvalidArgument: more than one element (a batch above 1 for a scalar input).
    """
    if array.size != 1:
        raise InvalidArgument(
            f"input '{name}' for model '{model}' is a scalar in the model but the request "
            f"holds {array.size} elements (shape {_dims(list(array.shape))})"
        )
    return array.reshape(())


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
