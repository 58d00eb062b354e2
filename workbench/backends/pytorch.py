"""PyTorch backend (``backend: "pytorch"`` / ``platform: "pytorch_libtorch"``): TorchScript models.

Follows Triton's pytorch_backend (the libtorch one): ``<version>/model.pt`` (or
``default_model_filename``) is a TorchScript module (``torch.jit.script`` / ``torch.jit.trace``
then ``.save``) loaded with ``torch.jit.load`` once per model instance. ``torch`` is imported
only when such a model loads, so the server runs without it (``pip install workbench[pytorch]``).

Inputs and outputs are bound as Triton binds them, checked at load:

- inputs: if every config input is named after a ``forward()`` argument, by name; else if every
  one follows ``<name>__<index>`` (``INPUT__0``), by that index; else in config order (with
  Triton's warning). A ``forward()`` taking a single ``Dict[str, Tensor]`` gets every input by
  its config name. Arguments must be ``Tensor`` (or ``List[str]`` for a 1-D BYTES input, as in
  Triton); the config must list as many inputs as ``forward()`` takes.
- outputs: ``forward()`` returns a Tensor, a ``List[str]`` (BYTES) or a tuple of these; config
  outputs named ``<name>__<index>`` (``OUTPUT__0``) take that element, others go in config order.
  Dicts and lists of tensors are refused, as Triton's TorchScript backend does.
- sequence batching: control inputs (START, END, READY, CORRID) and implicit state are
  ``forward()`` arguments / results too and, as in Triton, must be named ``<name>__<index>``
  (with state, every input and output must).

Datatypes: BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 (Triton's list); BYTES only
as ``List[str]``. UINT16/32/64 are refused (torch has the dtypes but no arithmetic on them) and so
is BF16 (this server's requests cannot carry it). An output's datatype and shape are compared with
the config at every execution; a mismatch fails that execution with a clear error.

A batch of requests is joined along dim 0, run in one ``forward()`` call, and every output is
split back. Instances: KIND_CPU on the CPU; KIND_GPU on ``cuda:<device_id>`` with its own CUDA
stream (a clear load error where torch sees no CUDA device); KIND_MODEL leaves the module on the
devices it was saved on and feeds it CPU tensors.

Config ``parameters`` (Triton's names; booleans accept true/false/1/0/on/off/yes/no):

- ``INFERENCE_MODE`` (default true): run under ``torch.inference_mode()``, else ``torch.no_grad()``.
- ``DISABLE_OPTIMIZED_EXECUTION``: ``torch._C._set_graph_executor_optimize(False)`` before each
  execution. The flag is thread-local in torch and every instance runs on its own thread, so it
  holds per instance (Triton sets it the same way, per execution).
- ``ENABLE_JIT_PROFILING`` / ``ENABLE_JIT_EXECUTOR`` / ``ENABLE_TENSOR_FUSER``: set before each
  execution when given (process-wide switches in torch, as in Triton).
- ``DISABLE_CUDNN`` (GPU instances), ``ENABLE_CACHE_CLEANING`` (``torch.cuda.empty_cache()``
  after each GPU execution; logged and ignored on CPU), ``ENABLE_WEIGHT_SHARING`` (instances of
  one model version on the same device share one loaded module).
- ``INTRA_OP_THREAD_COUNT`` or ``NUM_THREADS``: ``torch.set_num_threads``; ``INTER_OP_THREAD_COUNT``
  or ``NUM_INTEROP_THREADS``: ``torch.set_num_interop_threads``. Both are process-wide in torch:
  as in Triton, the first model that sets one wins and later different values are logged and
  ignored.
- ``ENABLE_NVFUSER`` (NvFuser is gone from PyTorch) and ``TORCH_COMPILE_OPTIONAL_PARAMETERS``
  (Triton's Python-based PyTorch runtime) are accepted and ignored with a log line.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelOutput

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

log = logging.getLogger(__name__)

#: model-config datatypes a TorchScript tensor carries -> ``torch`` dtype attribute names
CONFIG_TO_TORCH = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}
#: why the other datatypes cannot be served
_UNSUPPORTED = {
    "TYPE_UINT16": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_UINT32": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_UINT64": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_BF16": "this server cannot carry BF16 tensors in requests and responses",
}
_TORCH_TO_CONFIG_EXTRA = {"bfloat16": "TYPE_BF16", "uint16": "TYPE_UINT16",
                          "uint32": "TYPE_UINT32", "uint64": "TYPE_UINT64"}
_TRUE = frozenset({"true", "1", "on", "yes"})
_FALSE = frozenset({"false", "0", "off", "no"})
_NO_METADATA = (
    "TorchScript files carry no input/output metadata, so the pytorch backend cannot "
    "auto-complete them: list the inputs and outputs in config.pbtxt"
)
_OUTPUT_KINDS = (
    "output must be of type Tensor, List[str] or Tuple containing one of these two types. "
    "It should not be a List / Dictionary of Tensors or a Scalar"
)


class PyTorchBackend(Backend):
    """Creates :class:`PyTorchInstance` objects (one backend object per model version)."""

    names = ("pytorch",)
    default_model_filename = "model.pt"

    def __init__(self) -> None:
        #: ENABLE_WEIGHT_SHARING: str(device) -> the module loaded there for this version
        self.shared_modules: dict[str, Any] = {}

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return PyTorchInstance(config, version_dir, spec, self.shared_modules)


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """The model config ``parameters`` this backend reads (see the module docstring)."""

    optimized_execution: bool = True
    inference_mode: bool = True
    cudnn: bool = True
    cache_cleaning: bool = False
    weight_sharing: bool = False
    tensor_fuser: bool | None = None
    jit_profiling: bool | None = None
    jit_executor: bool | None = None
    intra_op_threads: int = 0
    inter_op_threads: int = 0


def parse_parameters(config: ModelConfig) -> TorchOptions:
    """Read the pytorch parameters of ``config`` (unknown keys are ignored, as in Triton).

    Raises:
        ModelLoadError: a boolean or thread count that does not parse.
    """
    params = {k: v.string_value for k, v in config.parameters.items()}

    def flag(key: str) -> bool | None:
        if key not in params:
            return None
        value = params[key].strip().lower()
        if value in _TRUE or value in _FALSE:
            return value in _TRUE
        raise ModelLoadError(
            f"unable to load model '{config.name}': parameter '{key}' must be a boolean "
            f"(true/false), got '{params[key]}'"
        )

    def count(*keys: str) -> int:
        for key in keys:
            if key in params:
                try:
                    value = int(params[key])
                except ValueError:
                    value = -1
                if value < 0:
                    raise ModelLoadError(
                        f"unable to load model '{config.name}': parameter '{key}' must be a "
                        f"non-negative integer, got '{params[key]}'"
                    )
                return value
        return 0

    for key in ("ENABLE_NVFUSER", "TORCH_COMPILE_OPTIONAL_PARAMETERS"):
        if key in params:
            why = ("NvFuser was removed from PyTorch" if key == "ENABLE_NVFUSER"
                   else "it applies to Triton's Python-based PyTorch runtime, not TorchScript")
            log.info("model '%s': parameter %s is ignored: %s", config.name, key, why)
    return TorchOptions(
        optimized_execution=not flag("DISABLE_OPTIMIZED_EXECUTION"),
        inference_mode=flag("INFERENCE_MODE") is not False,
        cudnn=not flag("DISABLE_CUDNN"),
        cache_cleaning=bool(flag("ENABLE_CACHE_CLEANING")),
        weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING")),
        tensor_fuser=flag("ENABLE_TENSOR_FUSER"),
        jit_profiling=flag("ENABLE_JIT_PROFILING"),
        jit_executor=flag("ENABLE_JIT_EXECUTOR"),
        intra_op_threads=count("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
        inter_op_threads=count("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
    )


#: process-wide torch thread pools: "intra"/"inter" -> (count, model that set it)
_THREAD_COUNTS: dict[str, tuple[int, str]] = {}
_THREAD_LOCK = threading.Lock()


def apply_thread_counts(torch, options: TorchOptions, model: str) -> None:
    """Size torch's intra-/inter-op thread pools; the first model that asks wins (Triton)."""
    with _THREAD_LOCK:
        for pool, wanted, setter, getter in (
            ("intra", options.intra_op_threads, torch.set_num_threads, torch.get_num_threads),
            ("inter", options.inter_op_threads, torch.set_num_interop_threads,
             torch.get_num_interop_threads),
        ):
            if wanted <= 0:
                continue
            if pool in _THREAD_COUNTS:
                count, owner = _THREAD_COUNTS[pool]
                if count != wanted:
                    log.warning(
                        "model '%s' asks for %d %s-op threads, but torch's %s-op thread pool is "
                        "process-wide and model '%s' already set it to %d; keeping %d",
                        model, wanted, pool, pool, owner, count, count,
                    )
                continue
            try:
                setter(wanted)
            except RuntimeError as exc:  # inter-op: only before torch's first parallel work
                log.warning("model '%s': cannot set %s-op threads to %d: %s", model, pool, wanted, exc)
                continue
            _THREAD_COUNTS[pool] = (wanted, model)
            log.info("%s-op thread count is set to %d for model '%s' (process-wide)",
                     pool.capitalize(), getter(), model)


@dataclass(frozen=True, slots=True)
class _Input:
    name: str
    position: int  # forward() argument index; -1 for a Dict[str, Tensor] forward()
    strings: bool  # BYTES, fed as List[str]
    optional: bool


@dataclass(frozen=True, slots=True)
class _Output:
    name: str
    index: int  # element of forward()'s result
    config_type: str  # "TYPE_FP32"
    dims: tuple[int, ...]  # per-sample shape the model returns (reshape.shape when given)
    client_dims: tuple[int, ...] | None  # the config dims when a reshape applies


class PyTorchInstance(ModelInstance):
    """One loaded TorchScript module on one device, driven by its instance thread.

    Raises (at construction):
        ModelLoadError: torch missing, model file missing or not TorchScript, device not
            usable, or config inputs/outputs that cannot bind to ``forward()``.
    """

    def __init__(
        self,
        config: ModelConfig,
        version_dir: Path,
        spec: InstanceSpec,
        shared_modules: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(spec)
        self._model_name = config.name
        if config.platform == "torch_aoti":
            raise ModelLoadError(
                f"unable to load model '{config.name}': platform 'torch_aoti' (AOT Inductor "
                "model.pt2 archives) is not supported; export TorchScript (model.pt) and use "
                "platform 'pytorch_libtorch'"
            )
        try:
            import torch  # imported here so the server runs without it
        except ImportError as exc:
            raise ModelLoadError(
                f"unable to load model '{config.name}': the pytorch backend needs the 'torch' "
                f"package ({exc}); install it with `pip install workbench[pytorch]`"
            ) from None
        self._torch = torch
        self._options = parse_parameters(config)
        self._device = _device(torch, config, spec)
        self._batched = config.max_batch_size > 0
        apply_thread_counts(torch, self._options, config.name)
        self._module = _load_module(torch, config, version_dir, spec, self._device,
                                    self._options, shared_modules)
        arguments, returns = _signature(self._module, config.name)
        self._dict_input = _is_dict_input(arguments)
        self._inputs = _bind_inputs(config, arguments, self._batched, self._dict_input)
        self._outputs = _bind_outputs(config, returns)
        self._output_names = [o.name for o in self._outputs]
        self._stream = (torch.cuda.Stream(device=self._device)
                        if self._device is not None and self._device.type == "cuda" else None)
        if self._options.cache_cleaning and self._stream is None:
            log.info("model '%s' instance '%s': ENABLE_CACHE_CLEANING has no effect off the GPU",
                     config.name, spec.name)
        log.info(
            "model '%s' instance '%s' on %s: optimized execution %s, inference mode %s, "
            "inputs bound %s",
            config.name, spec.name, self._device or "the module's own devices",
            "enabled" if self._options.optimized_execution else "disabled",
            "enabled" if self._options.inference_mode else "disabled (no_grad)",
            ", ".join(f"{i.name}->{'dict' if i.position < 0 else 'arg ' + str(i.position)}"
                      for i in self._inputs),
        )

    # -- execution -------------------------------------------------------------------------

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        torch = self._torch
        sizes = [r.batch_size for r in requests]
        total = sum(sizes)
        names = requested_union(requests, self._output_names)
        stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        with stream:
            args = self._gather(requests)
            times.mark_input_done()
            result = self._run(args)
            if self._stream is not None:
                self._stream.synchronize()
            times.mark_infer_done()
            outputs = self._read_outputs(result, names, total)
        if self._options.cache_cleaning and self._stream is not None:
            torch.cuda.empty_cache()
        return split_outputs(requests, outputs, sizes)

    def _gather(self, requests: Sequence[BackendRequest]):
        """Positional ``forward()`` arguments (or the one dict) for the whole batch."""
        values: dict[str, Any] = {}
        for spec in self._inputs:
            arrays = [r.inputs[spec.name] for r in requests if spec.name in r.inputs]
            if not arrays:
                continue  # an optional input no request carries
            if len(arrays) != len(requests):
                raise InvalidArgument(
                    f"optional input '{spec.name}' of model '{self._model_name}' is in some "
                    "requests of a batch but not in others"
                )
            array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
            values[spec.name] = (self._strings(array, spec.name) if spec.strings
                                 else self._tensor(array))
        if self._dict_input:
            return [values]
        args: list[Any] = [None] * len(self._inputs)
        for spec in self._inputs:
            args[spec.position] = values.get(spec.name)
        return args

    def _tensor(self, array: np.ndarray):
        # from_numpy needs a writable, native-order array (request buffers may be read-only)
        array = np.require(array, dtype=array.dtype.newbyteorder("="), requirements=("C", "W"))
        tensor = self._torch.from_numpy(array)
        if self._device is not None and self._device.type != "cpu":
            tensor = tensor.to(self._device, non_blocking=False)
        return tensor

    def _strings(self, array: np.ndarray, name: str) -> list[str]:
        try:
            return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
        except UnicodeDecodeError:
            raise InvalidArgument(
                f"input '{name}' for model '{self._model_name}' holds bytes that are not valid "
                "UTF-8; TorchScript strings must be UTF-8"
            ) from None

    def _run(self, args: list):
        torch, options = self._torch, self._options
        # thread-local in torch: this instance's thread only
        torch._C._set_graph_executor_optimize(options.optimized_execution)
        if options.tensor_fuser is not None:
            torch._C._jit_set_texpr_fuser_enabled(options.tensor_fuser)
        if options.jit_profiling is not None:
            torch._C._jit_set_profiling_mode(options.jit_profiling)
        if options.jit_executor is not None:
            torch._C._jit_set_profiling_executor(options.jit_executor)
        if self._stream is not None:
            torch.backends.cudnn.enabled = options.cudnn
        grad = torch.inference_mode() if options.inference_mode else torch.no_grad()
        try:
            with grad:
                return self._module(*args)
        except Exception as exc:  # torch.jit.Error, RuntimeError, ... from inside the model
            raise InternalError(f"PyTorch execute failure: {str(exc).rstrip()}") from None

    def _read_outputs(self, result: Any, names: Sequence[str], total: int) -> dict[str, np.ndarray]:
        if isinstance(result, tuple):
            items = list(result)
        elif isinstance(result, self._torch.Tensor) or _is_string_list(result):
            items = [result]
        else:
            raise InternalError(f"PyTorch execute failure: {_OUTPUT_KINDS}")
        outputs = {}
        for out in self._outputs:
            if out.index >= len(items):
                raise InvalidArgument(
                    f"The output {out.name} in the model configuration refers to an output "
                    f"index which doesn't exist. This model has {len(items)} outputs"
                )
            if out.name in names:
                outputs[out.name] = self._to_numpy(out, items[out.index], total)
        return outputs

    def _to_numpy(self, out: _Output, value: Any, total: int) -> np.ndarray:
        torch = self._torch
        if _is_string_list(value):
            if out.config_type != "TYPE_STRING":
                raise InvalidArgument(
                    f"configuration expects datatype {out.config_type} for output "
                    f"'{out.name}', model provides TYPE_STRING"
                )
            array = np.empty(len(value), dtype=object)
            array[:] = [s.encode("utf-8") for s in value]
        elif isinstance(value, torch.Tensor):
            provided = _torch_to_config(value.dtype)
            if provided != out.config_type:
                raise InvalidArgument(
                    f"configuration expects datatype {out.config_type} for output "
                    f"'{out.name}', model provides {provided}"
                )
            if value.dim() == 0:
                raise InvalidArgument(f"output '{out.name}' is a scalar which is not supported.")
            array = value.detach().cpu().numpy()
        else:
            raise InternalError(
                f"PyTorch execute failure: output at index {out.index} must be of type Tensor "
                f"or List[str], received {type(value).__name__}"
            )
        expected = ((total,) if self._batched else ()) + out.dims
        if len(array.shape) != len(expected) or any(
            e not in (-1, s) for e, s in zip(expected, array.shape)
        ):
            batch = (f" (batch dimension {total}, then the configured dims {_fmt(out.dims)})"
                     if self._batched else "")
            raise InternalError(
                f"output '{out.name}' of model '{self._model_name}' has shape "
                f"{_fmt(array.shape)}, but the model configuration expects "
                f"{_fmt(expected)}{batch}"
            )
        if out.client_dims is not None and list(out.client_dims).count(-1) <= 1:
            array = array.reshape(array.shape[: int(self._batched)] + out.client_dims)
        return array

    def unload(self) -> None:
        module = self.__dict__.pop("_module", None)
        if module is not None and self._stream is not None:
            del module
            self._torch.cuda.empty_cache()


# -- load-time helpers ---------------------------------------------------------------------------


def _device(torch, config: ModelConfig, spec: InstanceSpec):
    """The instance's torch device; None for KIND_MODEL (the module keeps its own devices)."""
    if spec.kind == "KIND_MODEL":
        return None
    if spec.kind != "KIND_GPU":
        return torch.device("cpu")
    usable = torch.cuda.is_available() and gpu_count() > 0
    if not usable:
        raise ModelLoadError(
            f"unable to load model '{config.name}': instance group '{spec.group_name}' is "
            f"KIND_GPU but no GPU is usable here (GPUs found: {gpu_count()}, torch "
            f"{torch.__version__} sees CUDA: {torch.cuda.is_available()}); use KIND_CPU or "
            "install a CUDA build of torch"
        )
    if spec.device_id >= torch.cuda.device_count():
        raise ModelLoadError(
            f"unable to load model '{config.name}': instance group '{spec.group_name}' asks "
            f"for GPU {spec.device_id}, but torch sees {torch.cuda.device_count()} CUDA device(s)"
        )
    return torch.device("cuda", spec.device_id)


def _load_module(torch, config: ModelConfig, version_dir: Path, spec: InstanceSpec, device,
                 options: TorchOptions, shared_modules: dict[str, Any] | None):
    path = version_dir / (config.default_model_filename or "model.pt")
    if not path.is_file():
        raise ModelLoadError(f"unable to find '{path}' for model instance '{spec.name}'")
    key = str(device)
    if options.weight_sharing and shared_modules is not None and key in shared_modules:
        log.info("Reusing TorchScript model for instance '%s'", spec.name)
        return shared_modules[key]
    guard = torch.inference_mode() if options.inference_mode else contextlib.nullcontext()
    try:
        with guard:
            module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # RuntimeError for a zip that is not TorchScript, ...
        raise ModelLoadError(
            f"failed to load model '{config.name}': {str(exc).rstrip()} ('{path.name}' must be a "
            "TorchScript module saved with torch.jit.save)"
        ) from None
    module.eval()
    if options.weight_sharing and shared_modules is not None:
        shared_modules[key] = module
    return module


def _signature(module, model: str) -> tuple[list, list]:
    """``forward()``'s arguments (without ``self``) and its return types."""
    try:
        schema = module.forward.schema
    except (AttributeError, RuntimeError):
        raise ModelLoadError(
            f"unable to load model '{model}': the TorchScript module has no forward() method"
        ) from None
    arguments = list(schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]
    return arguments, list(schema.returns)


def _is_dict_input(arguments: list) -> bool:
    return len(arguments) == 1 and arguments[0].type.kind() == "DictType"


def _is_string_list_type(t) -> bool:
    return t.kind() == "ListType" and t.getElementType().kind() == "StringType"


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _io_dims(entry) -> tuple[int, ...]:
    return tuple(int(d) for d in (entry.reshape.shape if entry.HasField("reshape") else entry.dims))


def _check_datatype(config: ModelConfig, entry, kind: str) -> str:
    name = DataType.Name(entry.data_type)
    if name in CONFIG_TO_TORCH or name == "TYPE_STRING":
        return name
    why = _UNSUPPORTED.get(name, "not a TorchScript tensor type")
    raise ModelLoadError(
        f"unsupported datatype {name} for {kind} '{entry.name}' for model '{config.name}' ({why})"
    )


def _named_index(name: str) -> int | None:
    """``<name>__<index>`` -> index (Triton: the part after the first ``__`` is all digits)."""
    _, sep, suffix = name.partition("__")
    return int(suffix) if sep and suffix.isdigit() else None


def _bind_inputs(config: ModelConfig, arguments: list, batched: bool, dict_input: bool) -> list[_Input]:
    m = config.name
    if not config.input:
        raise ModelLoadError(
            f"unable to load model '{m}': model configuration must contain at least one input, "
            f"none were specified ({_NO_METADATA})"
        )
    if dict_input:
        value_type = arguments[0].type.getValueType()
        if arguments[0].type.getKeyType().kind() != "StringType" or value_type.kind() != "TensorType":
            raise ModelLoadError(
                f"unable to load model '{m}': forward() takes {arguments[0].type}; a dict input "
                "must be Dict(str, Tensor)"
            )
        bound = []
        for entry in config.input:
            if _check_datatype(config, entry, "input") == "TYPE_STRING":
                raise ModelLoadError(
                    f"unable to load model '{m}': input '{entry.name}' is TYPE_STRING, but "
                    "forward() takes Dict(str, Tensor) and tensors cannot hold strings"
                )
            bound.append(_Input(entry.name, -1, False, entry.optional))
        bound += [_Input(name, -1, False, False) for name, _, _ in _sequence_inputs(config)]
        return bound

    for arg in arguments:
        kind = arg.type.kind()
        if kind == "DictType":
            raise ModelLoadError(
                f"unable to load model '{m}': Multiple inputs of kind DictType were detected. "
                "Only a single input of type Dict(str, Tensor) is supported."
            )
        if kind != "TensorType" and not _is_string_list_type(arg.type):
            raise ModelLoadError(
                f"unable to load model '{m}': An input of type '{arg.type}' was detected in the "
                "model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor "
                "are supported."
            )
    extras = _sequence_inputs(config)
    expected = len(config.input) + len(extras)
    if len(arguments) != expected:
        raise ModelLoadError(
            f"unable to load model '{m}', configuration expects {expected} inputs, "
            f"model provides {len(arguments)} (forward({', '.join(a.name for a in arguments)}))"
        )
    arg_names = [a.name for a in arguments]
    positions = _input_positions(config, arg_names, stateful=any(e[2] for e in extras))
    entries = [(e.name, _check_datatype(config, e, "input"), _io_dims(e), e.optional)
               for e in config.input]
    entries += [(name, datatype, (), False) for name, datatype, _ in extras]
    positions += [_named_index(name) for name, _, _ in extras]  # type: ignore[misc]
    _check_positions(m, [e[0] for e in entries], positions, arg_names)
    bound = []
    for (name, datatype, dims, optional), position in zip(entries, positions, strict=True):
        arg = arguments[position]
        strings = _is_string_list_type(arg.type)
        if (datatype == "TYPE_STRING") != strings:
            raise ModelLoadError(
                f"unable to load model '{m}': input '{name}' is {datatype} but binds to "
                f"forward() argument '{arg.name}' of type {arg.type}; TorchScript tensors "
                "cannot hold strings, so TYPE_STRING inputs need a List[str] argument and "
                "List[str] arguments a TYPE_STRING input"
            )
        if strings and len(dims) + int(batched) > 1:
            raise ModelLoadError(
                "Triton only supports 1 dimensional List of String as input for "
                f"'{name}' for model '{m}'"
            )
        bound.append(_Input(name, position, strings, optional))
    return bound


def _sequence_inputs(config: ModelConfig) -> list[tuple[str, str, bool]]:
    """(name, datatype, is_state) of the sequence batcher's control and implicit-state inputs;
    as in Triton they must be named ``<name>__<index>`` (forward()'s argument index)."""
    if not config.HasField("sequence_batching"):
        return []
    batching = config.sequence_batching
    extras = []
    for entry in batching.control_input:
        for control in entry.control:
            if control.kind == control.CONTROL_SEQUENCE_CORRID:
                datatype = DataType.Name(control.data_type)
            elif len(control.fp32_false_true):
                datatype = "TYPE_FP32"
            elif len(control.bool_false_true):
                datatype = "TYPE_BOOL"
            else:
                datatype = "TYPE_INT32"
            extras.append((entry.name, datatype, False))
    extras += [(state.input_name, DataType.Name(state.data_type), True) for state in batching.state]
    for name, datatype, is_state in extras:
        if _named_index(name) is None:
            what = "sequence state input" if is_state else "input"
            raise ModelLoadError(
                f"unable to load model '{config.name}': {what} '{name}' does not follow "
                "<name>__<index> naming convention."
            )
        if datatype not in CONFIG_TO_TORCH:
            raise ModelLoadError(
                f"unsupported datatype {datatype} for input '{name}' for model '{config.name}' "
                f"({_UNSUPPORTED.get(datatype, 'not a TorchScript tensor type')})"
            )
    return extras


def _check_positions(model: str, names: list[str], positions: list[int], arg_names: list[str]) -> None:
    """Every input takes its own forward() argument (beyond Triton, which would misbehave)."""
    seen: dict[int, str] = {}
    for name, index in zip(names, positions, strict=True):
        if index >= len(arg_names):
            raise ModelLoadError(
                f"unable to load model '{model}': input '{name}' refers to forward() argument "
                f"{index} (<name>__<index> naming convention), but forward() takes "
                f"{len(arg_names)} ({', '.join(arg_names)})"
            )
        if index in seen:
            raise ModelLoadError(
                f"unable to load model '{model}': inputs '{seen[index]}' and '{name}' both refer "
                f"to forward() argument {index}"
            )
        seen[index] = name


def _input_positions(config: ModelConfig, arg_names: list[str], stateful: bool = False) -> list[int]:
    """Triton's naming conventions: forward() argument names, else ``<name>__<index>``, else
    config order. Beyond Triton, config order that would bind an input named after one argument
    to another one is a load error."""
    m, names = config.name, [e.name for e in config.input]
    indices = [_named_index(n) for n in names]
    if stateful and any(i is None for i in indices):
        raise ModelLoadError(
            f"PyTorch model '{m}' is using sequence batching with state but not all inputs and "
            "outputs follow the <name>__<index> naming convention. "
        )
    if all(n in arg_names for n in names):
        return [arg_names.index(n) for n in names]
    if all(i is not None for i in indices):
        return indices  # type: ignore[return-value]
    for position, name in enumerate(names):
        if name in arg_names and arg_names[position] != name:
            raise ModelLoadError(
                f"unable to load model '{m}': input '{name}' is named after forward() argument "
                f"{arg_names.index(name)}, but not every input is named after a forward() "
                f"argument ({', '.join(arg_names)}) or follows <name>__<index>, so inputs bind "
                f"in configuration order and '{name}' would get argument {position} "
                f"('{arg_names[position]}'); name the inputs after forward()'s arguments or "
                "INPUT__<index>"
            )
    log.warning(
        "input '%s' or previous input(s) are neither an input argument to the model '%s' nor do "
        "they follow the <name>__<index> naming convention. Falling back to enforcing strict "
        "ordering from model configuration.",
        next(n for n, i in zip(names, indices) if i is None), m,
    )
    return list(range(len(names)))


def _bind_outputs(config: ModelConfig, returns: list) -> list[_Output]:
    m = config.name
    if not config.output:
        raise ModelLoadError(
            f"unable to load model '{m}': model configuration must contain at least one output, "
            f"none were specified ({_NO_METADATA})"
        )
    element_types = _return_elements(m, returns)
    states = list(config.sequence_batching.state) if config.HasField("sequence_batching") else []
    names = [o.name for o in config.output]
    indices = [_named_index(n) for n in names]
    if states and any(i is None for i in indices + [_named_index(s.output_name) for s in states]):
        raise ModelLoadError(
            f"PyTorch model '{m}' is using sequence batching with state but not all inputs and "
            "outputs follow the <name>__<index> naming convention. "
        )
    if any(i is None for i in indices):
        log.warning(
            "output '%s' or previous output(s) of the model '%s' do not follow the <name>__<index> "
            "naming convention. Falling back to enforcing strict ordering from model configuration.",
            next(n for n, i in zip(names, indices) if i is None), m,
        )
        indices = list(range(len(names)))
    entries = [(e, _check_datatype(config, e, "output"), _io_dims(e)) for e in config.output]
    for state in states:  # implicit state: fed back by the sequence batcher from this output
        if state.output_name not in names:
            state_type = DataType.Name(state.data_type)
            if state_type not in CONFIG_TO_TORCH:
                raise ModelLoadError(
                    f"unsupported datatype {state_type} for output state '{state.output_name}' "
                    f"for model '{m}'"
                )
            entry = ModelOutput(name=state.output_name, data_type=state.data_type)
            entries.append((entry, state_type, tuple(int(d) for d in state.dims)))
            indices.append(_named_index(state.output_name))
    bound = []
    for (entry, datatype, dims), index in zip(entries, indices, strict=True):
        if element_types is not None:
            if index >= len(element_types):
                raise ModelLoadError(
                    f"unable to load model '{m}': The output {entry.name} in the model "
                    "configuration refers to an output index which doesn't exist. This model has "
                    f"{len(element_types)} outputs"
                )
            element = element_types[index]
            if element is not None and (datatype == "TYPE_STRING") != _is_string_list_type(element):
                raise ModelLoadError(
                    f"unable to load model '{m}': output '{entry.name}' is {datatype}, but "
                    f"forward() returns {element} at index {index}; TYPE_STRING outputs must be "
                    "List[str] and tensors cannot be TYPE_STRING"
                )
        client = tuple(int(d) for d in entry.dims) if entry.HasField("reshape") else None
        bound.append(_Output(entry.name, int(index), datatype, dims, client))  # type: ignore[arg-type]
    return bound


def _return_elements(model: str, returns: list) -> list | None:
    """Types of forward()'s result elements (None: only known at execution; an element None:
    any type)."""
    if len(returns) != 1:
        return None
    t = returns[0].type
    kind = t.kind()
    if kind == "TupleType":
        elements = list(t.elements())
        for i, element in enumerate(elements):
            if element.kind() not in ("TensorType", "AnyType") and not _is_string_list_type(element):
                raise ModelLoadError(
                    f"unable to load model '{model}': forward() returns {t}; output at index {i} "
                    f"must be of type Tensor or List[str], received {element}"
                )
        return [e if e.kind() != "AnyType" else None for e in elements]
    if kind == "TensorType" or _is_string_list_type(t):
        return [t]
    if kind == "AnyType":
        return None
    raise ModelLoadError(f"unable to load model '{model}': forward() returns {t}; {_OUTPUT_KINDS}")


def _torch_to_config(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    for config_type, torch_name in CONFIG_TO_TORCH.items():
        if torch_name == name:
            return config_type
    return _TORCH_TO_CONFIG_EXTRA.get(name, str(dtype))


def _fmt(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
