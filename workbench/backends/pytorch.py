"""PyTorch backend (``backend: "pytorch"`` / ``platform: "pytorch_libtorch"``): TorchScript models.

Follows Triton's pytorch_backend (libtorch): ``<version>/model.pt`` (or
``default_model_filename``) loaded with ``torch.jit.load`` once per instance; ``torch`` is
imported only when such a model loads. Inputs bind to ``forward()`` by argument name, else by
``<name>__<index>``, else in config order (a single ``Dict[str, Tensor]`` argument gets them
all by name); outputs by ``<name>__<index>``, else in config order; sequence controls and
implicit state must be named ``<name>__<index>``. Binding and its load errors:
:mod:`.pytorch_binding`.

Datatypes: BOOL, UINT8, INT8..INT64, FP16/32/64; BYTES only as ``List[str]``; UINT16/32/64
and BF16 refused at load. Each output's datatype and shape are checked against the config at
every execution (a mismatch fails that execution). A batch is joined along dim 0, run in one
``forward()`` and split back; ragged inputs go in flat, ``batch_input`` targets are extra
arguments, scatter outputs are split by their source input's shapes.

Instances: KIND_CPU; KIND_GPU on ``cuda:<device_id>`` with its own CUDA stream (reports its
parameter and buffer bytes as ``GPU`` memory); KIND_MODEL (CPU tensors in). Config
``parameters`` (Triton's names): ``INFERENCE_MODE``, ``DISABLE_OPTIMIZED_EXECUTION``
(thread-local in torch, so per instance), the process-wide JIT switches and thread counts
(the first model that sets a thread count wins), ``DISABLE_CUDNN``, ``ENABLE_CACHE_CLEANING``,
``ENABLE_WEIGHT_SHARING``; ``ENABLE_NVFUSER`` and ``TORCH_COMPILE_OPTIONAL_PARAMETERS``
accepted and ignored. Docs: docs/backends.md, the **PyTorch** item."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from workbench.backends.pytorch_binding import (
    OUTPUT_KINDS,
    BoundOutput,
    bind_inputs,
    bind_outputs,
    format_shape,
    forward_signature,
    is_dict_input,
    is_string_list,
    torch_to_config,
)
from workbench.backends.pytorch_options import TorchOptions, apply_thread_counts, parse_parameters
from workbench.common.errors import InternalError, InvalidArgument, ModelLoadError
from workbench.common.frameworks import import_framework
from workbench.config.batch_io import batch_layout
from workbench.gpu.devices import gpu_count
from workbench.stats.statistics import MemoryUsage

log = logging.getLogger(__name__)


class PyTorchBackend(Backend):
    """Creates :class:`PyTorchInstance` objects (one backend object per model version)."""

    framework_modules = ("torch",)

    def __init__(self) -> None:
        #: ENABLE_WEIGHT_SHARING: str(device) -> the module loaded there for this version
        self.shared_modules: dict[str, Any] = {}

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return PyTorchInstance(config, version_dir, spec, self.shared_modules)


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
            torch = import_framework("torch")  # imported here so the server runs without it
        except ImportError as exc:
            raise ModelLoadError(
                f"unable to load model '{config.name}': the pytorch backend needs the 'torch' "
                f"package ({exc}); install it with `pip install workbench[pytorch]`"
            ) from None
        self._torch = torch
        self._options = parse_parameters(config)
        self._device = _device(torch, config, spec)
        self._batched = config.max_batch_size > 0
        self._layout = batch_layout(config)
        apply_thread_counts(torch, self._options, config.name)
        self._module, shared = _load_module(torch, config, version_dir, spec, self._device,
                                            self._options, shared_modules)
        on_cuda = self._device is not None and self._device.type == "cuda"
        #: bytes of this instance's own parameters and buffers on its CUDA device
        self._gpu_bytes = (module_device_bytes(self._module, self._device)
                           if on_cuda and not shared else 0)
        #: bytes of this instance's own parameters and buffers in host memory (CPU instances)
        self._cpu_bytes = (module_device_bytes(self._module, torch.device("cpu"))
                           if not on_cuda and not shared else 0)
        arguments, returns = forward_signature(self._module, config.name)
        self._dict_input = is_dict_input(arguments)
        self._inputs = bind_inputs(config, arguments, self._batched, self._dict_input)
        self._outputs = bind_outputs(config, returns)
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
        return split_outputs(requests, outputs, sizes, self._layout)

    def _gather(self, requests: Sequence[BackendRequest]):
        """Positional ``forward()`` arguments (or the one dict) for the whole batch."""
        feed, _ = gather_inputs(requests, [spec.name for spec in self._inputs],
                                model=self._model_name, layout=self._layout)
        values: dict[str, Any] = {  # an optional input no request carries stays None
            spec.name: (self._strings(feed[spec.name], spec.name) if spec.strings
                        else self._tensor(feed[spec.name]))
            for spec in self._inputs if spec.name in feed
        }
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
        except Exception as exc:  # noqa: BLE001  # the model's own code: whatever it raises fails the batch
            raise InternalError(f"PyTorch execute failure: {str(exc).rstrip()}") from None

    def _read_outputs(self, result: Any, names: Sequence[str], total: int) -> dict[str, np.ndarray]:
        if isinstance(result, tuple):
            items = list(result)
        elif isinstance(result, self._torch.Tensor) or is_string_list(result):
            items = [result]
        else:
            raise InternalError(f"PyTorch execute failure: {OUTPUT_KINDS}")
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

    def _to_numpy(self, out: BoundOutput, value: Any, total: int) -> np.ndarray:
        torch = self._torch
        if is_string_list(value):
            if out.config_type != "TYPE_STRING":
                raise InvalidArgument(
                    f"configuration expects datatype {out.config_type} for output "
                    f"'{out.name}', model provides TYPE_STRING"
                )
            array: np.ndarray = np.empty(len(value), dtype=object)
            array[:] = [s.encode("utf-8") for s in value]
        elif isinstance(value, torch.Tensor):
            provided = torch_to_config(value.dtype)
            if provided != out.config_type:
                raise InvalidArgument(
                    f"configuration expects datatype {out.config_type} for output "
                    f"'{out.name}', model provides {provided}"
                )
            if value.dim() == 0:
                raise InvalidArgument(f"output '{out.name}' is a scalar which is not supported.")
            array = value.detach().cpu().numpy()
            if out.name in self._layout.outputs:  # split by its source input's shapes
                return array
        else:
            raise InternalError(
                f"PyTorch execute failure: output at index {out.index} must be of type Tensor "
                f"or List[str], received {type(value).__name__}"
            )
        expected = ((total,) if self._batched else ()) + out.dims
        if len(array.shape) != len(expected) or any(
            e not in (-1, s) for e, s in zip(expected, array.shape, strict=True)
        ):
            batch = (f" (batch dimension {total}, then the configured dims {format_shape(out.dims)})"
                     if self._batched else "")
            raise InternalError(
                f"output '{out.name}' of model '{self._model_name}' has shape "
                f"{format_shape(array.shape)}, but the model configuration expects "
                f"{format_shape(expected)}{batch}"
            )
        return array  # in the reshape shape: the engine gives clients the config's dims

    def reported_memory(self) -> list[MemoryUsage]:
        """A KIND_GPU instance's parameters and buffers on ``cuda:<device_id>`` (0 for an
        instance that reuses another's module under ``ENABLE_WEIGHT_SHARING``). It replaces
        the loader's NVML growth for that device, which would also count the CUDA context and
        the caching allocator's slack. A CPU instance's parameters and buffers in host memory
        replace the loader's resident-set growth, which would count the first load's torch
        runtime set-up (thread pools, kernels) as the model's."""
        if self._stream is None:
            return [MemoryUsage("CPU", 0, self._cpu_bytes)]
        return [MemoryUsage("GPU", self._device.index or 0, self._gpu_bytes)]

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


def module_device_bytes(module, device) -> int:
    """Bytes of ``module``'s parameters and buffers that live on ``device`` (a
    ``torch.device``), each tensor counted once. Tensors a traced graph keeps as constants
    are not parameters and are not counted."""
    seen: set[int] = set()
    total = 0
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.device == device and id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


#: held while an ENABLE_WEIGHT_SHARING instance looks up, loads and stores its module: the
#: instances of a version load on parallel threads, and the second must find the first's module
_SHARING = threading.Lock()


def _load_module(torch, config: ModelConfig, version_dir: Path, spec: InstanceSpec, device,
                 options: TorchOptions, shared_modules: dict[str, Any] | None) -> tuple[Any, bool]:
    """The instance's TorchScript module, and whether it is another instance's (weight sharing)."""
    path = version_dir / (config.default_model_filename or "model.pt")
    if not path.is_file():
        raise ModelLoadError(f"unable to find '{path}' for model instance '{spec.name}'")
    if not options.weight_sharing or shared_modules is None:
        return _read_module(torch, config, path, device, options), False
    key = str(device)
    with _SHARING:
        if key in shared_modules:
            log.info("Reusing TorchScript model for instance '%s'", spec.name)
            return shared_modules[key], True
        shared_modules[key] = _read_module(torch, config, path, device, options)
        return shared_modules[key], False


def _read_module(torch, config: ModelConfig, path: Path, device, options: TorchOptions) -> Any:
    guard = torch.inference_mode() if options.inference_mode else contextlib.nullcontext()
    try:
        with guard:
            module = torch.jit.load(str(path), map_location=device)
    except (RuntimeError, ValueError, OSError) as exc:  # not a TorchScript zip; no such file
        raise ModelLoadError(
            f"failed to load model '{config.name}': {str(exc).rstrip()} ('{path.name}' must be a "
            "TorchScript module saved with torch.jit.save)"
        ) from None
    module.eval()
    return module
