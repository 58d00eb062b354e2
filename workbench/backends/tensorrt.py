"""TensorRT backend (``backend: "tensorrt"`` / ``platform: "tensorrt_plan"``): serialized
TensorRT engines (``<version>/model.plan``, or ``default_model_filename``).

Follows Triton's tensorrt_backend with TensorRT 10's API (named I/O tensors,
``execute_async_v3`` on one CUDA stream per instance, optimization profiles). ``tensorrt`` and
``cuda-python`` are imported only when a plan loads; without them or a GPU the model is
UNAVAILABLE with the reason (:data:`~workbench.config.tensorrt_plan.REQUIREMENTS`).

- KIND_GPU only, on ``cuda:<device_id>``; each instance deserializes the plan (version or
  architecture mismatches explained: :func:`~workbench.config.tensorrt_plan.explain_plan_errors`)
  and creates one execution context per profile it uses (the group's ``profile`` list, else
  0); an execution runs in the fitting profile closest to its opt shapes.
- Load checks: :mod:`workbench.config.tensorrt_io`, :mod:`workbench.config.tensorrt_profiles`.
- Execution: the batch joined along dim 0, input shapes set, inputs copied to growing device
  buffers, every output computed and the requested ones copied back, split per request;
  ragged batching as Triton's (:mod:`workbench.backends.batching`); data-dependent output
  shapes are not supported.
- ``execution_context_allocation_strategy`` (``STATIC`` / ``ON_PROFILE_CHANGE`` /
  ``RUNTIME``) applied; ``optimization { cuda { graphs ... } }`` accepted and ignored (logged).
- ``reported_memory()``: GPU bytes: the plan's size plus each context's
  ``device_memory_size_v2``.

Docs: docs/backends.md, the **TensorRT** item."""

from __future__ import annotations

import logging
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
from workbench.backends.tensorrt_cuda import (
    CudaDevice,
    CudaStream,
    DeviceBuffer,
    copy_to_device,
    copy_to_host,
    import_runtime,
)
from workbench.common.datatypes import WIRE_TO_NUMPY
from workbench.common.errors import InternalError, InvalidArgument, ModelLoadError
from workbench.config.batch_io import batch_layout
from workbench.config.tensorrt_io import check_config_io, format_shape
from workbench.config.tensorrt_plan import (
    captured_errors,
    deserialize,
    engine_tensors,
    import_tensorrt,
    trt_logger,
)
from workbench.config.tensorrt_profiles import check_profiles, choose_profile, instance_profiles
from workbench.files.model_files import read_model_bytes
from workbench.gpu.devices import gpu_count
from workbench.stats.statistics import MemoryUsage

log = logging.getLogger(__name__)

_STRATEGIES = ("STATIC", "ON_PROFILE_CHANGE", "RUNTIME")


class TensorRTBackend(Backend):
    """Creates :class:`TensorRTInstance` objects."""

    framework_modules = ("tensorrt",)

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return TensorRTInstance(config, version_dir, spec)


class TensorRTInstance(ModelInstance):
    """One deserialized engine with its execution contexts and CUDA stream on one GPU.

    Raises (at construction):
        ModelLoadError: no tensorrt / cuda-python / GPU, not KIND_GPU, plan file missing or
            not loadable here (version, architecture), config and engine disagree.
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> None:
        super().__init__(spec)
        self._model = config.name
        self._contexts: dict[int, Any] = {}
        self._buffers: dict[str, DeviceBuffer] = {}
        self._stream: CudaStream | None = None
        path = version_dir / (config.default_model_filename or "model.plan")
        if not path.is_file():
            raise ModelLoadError(f"unable to find '{path}' for model instance '{spec.name}'")
        trt = import_tensorrt(config.name)
        self._cuda = import_runtime(config.name)
        _check_device(config, spec)
        _log_ignored_options(config)
        self._device = CudaDevice(self._cuda, spec.device_id)
        self._device.activate()
        data = read_model_bytes(path)
        self._runtime = trt.Runtime(trt_logger(trt))
        self._engine = deserialize(trt, self._runtime, data, model=config.name, path=path,
                                   device_id=spec.device_id)
        self._plan_bytes = len(data)
        tensors = engine_tensors(trt, self._engine)
        check_config_io(config, tensors)
        self._layout = batch_layout(config)
        self._inputs = [t for t in tensors if t.is_input]
        self._profiles = instance_profiles(config, spec.group_name,
                                           self._engine.num_optimization_profiles)
        dims = {e.name: list(e.reshape.shape if e.HasField("reshape") else e.dims)
                for e in config.input}
        check_profiles(config.name, config.max_batch_size, dims, self._inputs, self._profiles,
                       free=self._layout.ragged | set(self._layout.targets))
        self._outputs = [t.name for t in tensors if not t.is_input]
        self._dtypes = {t.name: WIRE_TO_NUMPY[t.datatype.removeprefix("TYPE_")] for t in tensors
                        if t.datatype.removeprefix("TYPE_") in WIRE_TO_NUMPY}
        _check_servable_types(config, tensors, self._dtypes)
        self._config_outputs = [o.name for o in config.output] or self._outputs
        self._batched = config.max_batch_size > 0
        self._stream = CudaStream(self._cuda)
        self._create_contexts(trt, _allocation_strategy(trt, config), self._stream)
        log.info("model '%s' instance '%s' on GPU %d (compute %s, TensorRT %s): optimization "
                 "profile(s) %s", config.name, spec.name, spec.device_id,
                 self._device.capability(), trt.__version__,
                 ", ".join(str(p) for p in self._profiles))

    def _create_contexts(self, trt, strategy, stream: CudaStream) -> None:
        for index in self._profiles:
            with captured_errors() as lines:
                context = self._engine.create_execution_context(strategy)
                ok = context is not None and (
                    index == 0 or context.set_optimization_profile_async(index, stream.handle))
            if not ok:
                raise ModelLoadError(
                    f"unable to load model '{self._model}': unable to create TensorRT context for "
                    f"optimization profile {index}: {'; '.join(lines) or 'no reason logged'}"
                )
            self._contexts[index] = context
        stream.synchronize()

    # -- execution ---------------------------------------------------------------------------

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        stream = self._live_stream()
        self._device.activate()  # per host thread: the instance thread is not the load thread
        feed, sizes = self._gather(requests)
        shapes = {name: tuple(array.shape) for name, array in feed.items()}
        context = self._contexts[choose_profile(self._model, shapes, self._inputs, self._profiles)]
        for name, array in feed.items():
            self._bind_input(context, name, array, stream)
        host = {name: self._bind_output(context, name) for name in self._outputs}
        times.mark_input_done()
        with captured_errors() as lines:
            ok = context.execute_async_v3(stream.handle)
        if not ok:
            stream.synchronize()
            raise InternalError(f"TensorRT failed to run model '{self._model}': "
                                f"{'; '.join(lines) or 'no reason logged'}")
        wanted = requested_union(requests, self._config_outputs)
        for name in wanted:
            copy_to_host(self._cuda, host[name], self._buffers[name].address, stream)
        stream.synchronize()
        times.mark_infer_done()
        return split_outputs(requests, {name: host[name] for name in wanted}, sizes, self._layout)

    def _live_stream(self) -> CudaStream:
        """The instance's CUDA stream (None only once :meth:`unload` ran)."""
        if self._stream is None:
            raise InternalError(f"instance '{self.name}' of model '{self._model}' is unloaded")
        return self._stream

    def _gather(self, requests: Sequence[BackendRequest]) -> tuple[dict[str, np.ndarray], list[int]]:
        computed = set(self._layout.targets)  # batch inputs: computed from the batch
        for tensor in self._inputs:
            if tensor.name not in computed and any(tensor.name not in r.inputs for r in requests):
                raise InvalidArgument(
                    f"input '{tensor.name}' of model '{self._model}' is required by the TensorRT "
                    "engine but missing from " + ("a request" if len(requests) == 1 else
                                                  "some requests of the batch")
                )
        feed, sizes = gather_inputs(requests, [t.name for t in self._inputs], model=self._model,
                                    layout=self._layout)
        return {name: np.ascontiguousarray(array, dtype=self._dtypes[name])
                for name, array in feed.items()}, sizes

    def _bind_input(self, context, name: str, array: np.ndarray, stream: CudaStream) -> None:
        with captured_errors() as lines:
            ok = context.set_input_shape(name, array.shape)
        if not ok:
            raise InvalidArgument(
                f"TensorRT refused shape {format_shape(array.shape)} for input '{name}' of model "
                f"'{self._model}': {'; '.join(lines) or 'no reason logged'}"
            )
        address = self._buffer(name).ensure(array.nbytes)
        copy_to_device(self._cuda, address, array, stream)
        context.set_tensor_address(name, address)

    def _bind_output(self, context, name: str) -> np.ndarray:
        shape = tuple(int(d) for d in context.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            raise InternalError(
                f"output '{name}' of model '{self._model}' has a data-dependent shape "
                f"{format_shape(shape)}, which the tensorrt backend here does not support"
            )
        array = np.empty(shape, dtype=self._dtypes[name])
        context.set_tensor_address(name, self._buffer(name).ensure(array.nbytes))
        return array

    def _buffer(self, name: str) -> DeviceBuffer:
        if name not in self._buffers:
            self._buffers[name] = DeviceBuffer(self._cuda)
        return self._buffers[name]

    # -- lifetime ----------------------------------------------------------------------------

    def reported_memory(self) -> list[MemoryUsage]:
        engine = self.__dict__.get("_engine")
        if engine is None:
            return []
        per_context = getattr(engine, "device_memory_size_v2", None)
        if per_context is None:  # TensorRT 10.0 has only the (later deprecated) v1 property
            per_context = engine.device_memory_size
        used = self._plan_bytes + int(per_context) * len(self._contexts)
        used += sum(b.capacity for b in self._buffers.values())
        return [MemoryUsage("GPU", self.spec.device_id, used)]

    def unload(self) -> None:
        if "_device" not in self.__dict__:
            return
        self._device.activate()
        if self._stream is not None:
            self._stream.synchronize()
        self._contexts.clear()
        for buffer in self._buffers.values():
            buffer.free()
        self._buffers.clear()
        self.__dict__.pop("_engine", None)
        self.__dict__.pop("_runtime", None)
        if self._stream is not None:
            self._stream.destroy()
            self._stream = None


def _check_device(config: ModelConfig, spec: InstanceSpec) -> None:
    if spec.kind != "KIND_GPU":
        raise ModelLoadError(
            f"unable to load model '{config.name}', TensorRT backend supports only GPU device "
            f"(instance group '{spec.group_name}' is {spec.kind})"
        )
    if spec.device_id >= gpu_count():
        raise ModelLoadError(
            f"unable to load model '{config.name}': instance group '{spec.group_name}' asks for "
            f"GPU {spec.device_id}, but {gpu_count()} GPU(s) are visible"
        )


def _check_servable_types(config: ModelConfig, tensors, dtypes: dict) -> None:
    for tensor in tensors:
        if tensor.name not in dtypes:
            raise ModelLoadError(
                f"unable to load model '{config.name}': the TensorRT engine's tensor "
                f"'{tensor.name}' is {tensor.datatype}, which requests and responses here cannot "
                "carry"
            )


def _allocation_strategy(trt, config: ModelConfig):
    """Triton's ``execution_context_allocation_strategy`` parameter (default STATIC)."""
    value = "STATIC"
    if "execution_context_allocation_strategy" in config.parameters:
        value = config.parameters["execution_context_allocation_strategy"].string_value.strip()
    if value.upper() not in _STRATEGIES:
        raise ModelLoadError(
            f"unable to load model '{config.name}': invalid value '{value}' for parameter "
            f"'execution_context_allocation_strategy'; expected one of {', '.join(_STRATEGIES)}"
        )
    return getattr(trt.ExecutionContextAllocationStrategy, value.upper())


def _log_ignored_options(config: ModelConfig) -> None:
    cuda = config.optimization.cuda
    if config.optimization.HasField("cuda") and (cuda.graphs or cuda.graph_spec):
        log.warning("model '%s': optimization.cuda.graphs / graph_spec are ignored: the "
                    "tensorrt backend here does not capture CUDA graphs", config.name)
    if config.optimization.HasField("cuda") and (cuda.busy_wait_events or cuda.output_copy_stream):
        log.info("model '%s': optimization.cuda.busy_wait_events / output_copy_stream are "
                 "ignored: each instance runs copies and execution on its one stream", config.name)
