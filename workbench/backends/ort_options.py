"""Model config -> ONNX Runtime session settings and execution providers (pure, no ORT import).

Follows Triton's onnxruntime_backend (``src/onnxruntime.cc`` and its README's optimization
sections):

* ``optimization { graph { level } }``: -1 ``ORT_ENABLE_BASIC``, 1 ``ORT_ENABLE_EXTENDED``,
  2 ``ORT_DISABLE_ALL``, else ``ORT_ENABLE_ALL``.
* ``parameters``: ``intra_op_thread_count`` / ``inter_op_thread_count`` (> 0 applied),
  ``execution_mode`` (0 / 1, else a load error), ``enable_mem_arena`` / ``enable_mem_pattern``,
  ``session.*`` config entries (always win). Intra-op spinning defaults on only where the
  model's threads leave cores to the server (:func:`default_intra_op_spinning`), inter-op off.
* ``gpu_execution_accelerator`` (KIND_GPU only): ``tensorrt`` (:data:`TRT_PARAMETERS`,
  sizes in bytes) and ``cuda`` (CUDA provider options; the CUDA provider is always added for
  KIND_GPU); ``cpu_execution_accelerator``: ``openvino`` (``device_type: CPU``).

Provider order is Triton's: gpu accelerators, CUDA (KIND_GPU), cpu accelerators, CPU. An
accelerator whose provider the installed onnxruntime lacks fails the load with Triton's
"unknown Execution Accelerator '<name>' is requested" plus the missing provider and package.
Docs: docs/backends.md, the **ONNX Runtime** item."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import ModelLoadError
from workbench.common.switches import parse_switch

TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"

#: provider -> what to install to get it (for the "provider unavailable" load error).
INSTALL_HINT = {
    TENSORRT: "onnxruntime-gpu built with TensorRT (and TensorRT itself) on a machine with an NVIDIA GPU",
    CUDA: "onnxruntime-gpu on a machine with an NVIDIA GPU",
    OPENVINO: "onnxruntime-openvino instead of onnxruntime",
}

_INT, _BOOL, _STR = "int", "bool", "str"

#: Triton key of a ``tensorrt`` accelerator parameter -> (TensorRT EP option, value type).
#: ``precision_mode`` is handled apart (it maps to one of three options).
TRT_PARAMETERS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", _INT),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", _INT),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", _INT),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", _STR),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _BOOL),
    "trt_dla_enable": ("trt_dla_enable", _BOOL),
    "trt_dla_core": ("trt_dla_core", _INT),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", _BOOL),
    "trt_engine_cache_path": ("trt_engine_cache_path", _STR),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", _STR),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", _BOOL),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", _BOOL),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", _BOOL),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", _BOOL),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", _BOOL),
    "trt_timing_cache_path": ("trt_timing_cache_path", _STR),
    "trt_force_timing_cache": ("trt_force_timing_cache", _BOOL),
    "trt_detailed_build_log": ("trt_detailed_build_log", _BOOL),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", _BOOL),
    "trt_sparsity_enable": ("trt_sparsity_enable", _BOOL),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", _INT),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", _INT),
    "trt_tactic_sources": ("trt_tactic_sources", _STR),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", _STR),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", _STR),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", _STR),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", _STR),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", _BOOL),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", _BOOL),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", _STR),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", _INT),
}

_PRECISION = {"FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable", "INT8": "trt_int8_enable"}

#: ``optimization.graph.level`` -> ``onnxruntime.GraphOptimizationLevel`` member name.
GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}

INTRA_SPINNING = "session.intra_op.allow_spinning"
INTER_SPINNING = "session.inter_op.allow_spinning"

#: CPUs left to the rest of the server (the event loop thread, gRPC's threads, the other models)
#: before a model's intra-op threads may spin by default. Measured on 2 shared cores (bench/RESULTS.md,
#: "Issue 20: ONNX Runtime on the compute-bound model"): spinning threads that share cores with the
#: event loop or anything else slow the event-loop-bound models and, when the cores are contended,
#: the compute-bound ones too.
SPIN_RESERVED_CPUS = 2


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_intra_op_spinning(intra_op_threads: int, instances: int, cpus: int) -> bool:
    """Whether a model's intra-op threads spin-wait (ORT's default) unless its config says.

    On only when the intra-op threads of all the model's instances (``intra_op_threads`` each,
    0 = ORT's pick: one per core, so never) fit on ``cpus`` with :data:`SPIN_RESERVED_CPUS`
    left over: a spinning thread then burns a core nobody else needs and saves the wake-up
    between an operator's parallel sections. On a machine without such spare cores (e.g. 2
    cores and ``intra_op_thread_count: 2``) it stays off: spinning threads there take the
    cores the event loop and other work need. ORT's own default (which the bench's Triton peer
    runs with) is on everywhere; ``session.intra_op.allow_spinning`` in the config overrides this.
    """
    if intra_op_threads <= 0:
        return False
    return intra_op_threads * max(1, instances) + SPIN_RESERVED_CPUS <= cpus


@dataclass
class OrtSessionPlan:
    """What to set on ``onnxruntime.SessionOptions`` and which providers to pass.

    Attributes:
        graph_level: a ``GraphOptimizationLevel`` member name.
        intra_op_threads / inter_op_threads: thread counts, 0 = ORT's default.
        parallel: ``ExecutionMode.ORT_PARALLEL`` instead of sequential.
        mem_arena / mem_pattern: ``enable_cpu_mem_arena`` / ``enable_mem_pattern``; None = ORT default.
        config_entries: ``add_session_config_entry`` key -> value.
        providers: ``(provider name, {option: str value})`` in priority order.
    """

    graph_level: str = "ORT_ENABLE_ALL"
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    parallel: bool = False
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    config_entries: dict[str, str] = field(default_factory=dict)
    providers: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def session_plan(
    config: ModelConfig, kind: str, device_id: int, available: Iterable[str],
    cpus: int | None = None,
) -> OrtSessionPlan:
    """The ORT settings for one instance of ``config`` (``kind``: ``KIND_CPU``/``KIND_GPU``).

    ``available``: ``onnxruntime.get_available_providers()``. ``cpus``: the CPUs the server may
    use (default :func:`usable_cpus`), for the default of intra-op spinning
    (:func:`default_intra_op_spinning`).

    Raises:
        ModelLoadError: a parameter value that does not parse, an unknown accelerator or
            accelerator parameter (Triton's texts), or an accelerator whose provider is not in
            ``available`` (naming the provider and the package that has it).
    """
    name = config.name
    params = {k: v.string_value for k, v in config.parameters.items()}
    plan = OrtSessionPlan()
    plan.graph_level = GRAPH_LEVELS.get(int(config.optimization.graph.level), "ORT_ENABLE_ALL")
    plan.intra_op_threads = max(0, _int(name, params, "intra_op_thread_count", 0))
    plan.inter_op_threads = max(0, _int(name, params, "inter_op_thread_count", 0))
    mode = _int(name, params, "execution_mode", 0)
    if mode not in (0, 1):
        raise _error(name, "Invalid configuration value provided. Expected values for "
                     f" execution_mode are 0 or 1 but got {mode} .")
    plan.parallel = mode == 1
    if "enable_mem_arena" in params:
        plan.mem_arena = _bool(name, "enable_mem_arena", params["enable_mem_arena"])
    if "enable_mem_pattern" in params:
        plan.mem_pattern = _bool(name, "enable_mem_pattern", params["enable_mem_pattern"])
    instances = sum(max(1, group.count) for group in config.instance_group) or 1
    spin = default_intra_op_spinning(plan.intra_op_threads, instances,
                                     usable_cpus() if cpus is None else cpus)
    plan.config_entries = {
        INTRA_SPINNING: "1" if spin else "0",
        INTER_SPINNING: "0",
        **{k: v for k, v in params.items() if k.startswith("session.")},
    }
    available = set(available)
    accelerators = config.optimization.execution_accelerators
    if kind == "KIND_GPU":
        cuda: dict[str, str] = {}
        for acc in accelerators.gpu_execution_accelerator:
            acc_params = dict(acc.parameters)
            if acc.name == "tensorrt":
                _need(name, acc.name, TENSORRT, available)
                options = tensorrt_options(name, acc_params)
                options["device_id"] = str(device_id)
                plan.providers.append((TENSORRT, options))
            elif acc.name == "cuda":
                cuda.update({k: _cuda_value(name, k, v) for k, v in acc_params.items()})
            else:
                raise _unknown(name, acc.name)
        _need(name, "KIND_GPU", CUDA, available)
        plan.providers.append((CUDA, {**cuda_options(name, params), **cuda,
                                      "device_id": str(device_id)}))
    for acc in accelerators.cpu_execution_accelerator:
        if acc.name != "openvino":
            raise _unknown(name, acc.name)
        _need(name, acc.name, OPENVINO, available)
        plan.providers.append((OPENVINO, {"device_type": "CPU"}))
    plan.providers.append((CPU, {}))
    return plan


def tensorrt_options(model: str, parameters: dict[str, str]) -> dict[str, str]:
    """Triton's ``tensorrt`` accelerator parameters -> TensorRT EP options (string values).

    Ints are checked and passed as given; bools are normalised to ``"True"``/``"False"``
    (ORT's spelling); FP32 precision sets nothing (TensorRT's default).

    Raises:
        ModelLoadError: "unsupported precision mode 'X' is requested", "unknown parameter
            'k' is provided for TensorRT Execution Accelerator", or a value that is not an
            int / bool where one is needed.
    """
    options: dict[str, str] = {}
    for key, value in parameters.items():
        if key == "precision_mode":
            if value in _PRECISION:
                options[_PRECISION[value]] = "True"
            elif value != "FP32":
                raise _error(model, f"unsupported precision mode '{value}' is requested")
            continue
        if key not in TRT_PARAMETERS:
            raise _error(model, f"unknown parameter '{key}' is provided for TensorRT "
                         "Execution Accelerator")
        option, kind = TRT_PARAMETERS[key]
        if kind == _INT:
            _parse_int(model, key, value)
        elif kind == _BOOL:
            value = str(_bool(model, key, value))
        if value:
            options[option] = value
    return options


def cuda_options(model: str, params: dict[str, str]) -> dict[str, str]:
    """CUDA EP options from the deprecated top-level ``parameters`` (Triton applies them,
    with its defaults, only when the config has a ``parameters`` section).

    Raises:
        ModelLoadError: ``cudnn_conv_algo_search`` not 0/1/2 or ``arena_extend_strategy``
            not 0/1 (Triton's "unsupported ... value 'N' is requested").
    """
    if not params:
        return {}
    algo = _int(model, params, "cudnn_conv_algo_search", 0)
    algos = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
    if algo not in algos:
        raise _error(model, f"unsupported cudnn_conv_algo_search value '{algo}' is requested")
    strategy = _int(model, params, "arena_extend_strategy", 0)
    strategies = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}
    if strategy not in strategies:
        raise _error(model, f"unsupported arena_extend_strategy value '{strategy}' is requested")
    return {
        "cudnn_conv_algo_search": algos[algo],
        "gpu_mem_limit": params.get("gpu_mem_limit", str(2**64 - 1)),
        "arena_extend_strategy": strategies[strategy],
        "do_copy_in_default_stream": params.get("do_copy_in_default_stream", "1"),
    }


def _cuda_value(model: str, key: str, value: str) -> str:
    if key in ("do_copy_in_default_stream", "use_ep_level_unified_stream"):
        return str(_bool(model, key, value))
    return value


def _need(model: str, accelerator: str, provider: str, available: set[str]) -> None:
    if provider in available:
        return
    if accelerator == "KIND_GPU":
        return  # the backend checks GPU presence itself, with its own message
    raise _error(
        model,
        f"unknown Execution Accelerator '{accelerator}' is requested: it needs ONNX Runtime's "
        f"{provider}, which the installed onnxruntime does not have (providers: "
        f"{', '.join(sorted(available))}); install {INSTALL_HINT[provider]}",
    )


def check_providers_started(model: str, plan: OrtSessionPlan, active: Iterable[str]) -> None:
    """Fail the load when the session runs without a provider the plan asked for.

    ``active``: ``InferenceSession.get_providers()``. onnxruntime's Python API falls back to
    the remaining providers when one fails to start (it prints "EP Error ... Falling back"),
    e.g. the TensorRT provider without TensorRT's libraries; a KIND_GPU instance would then
    run somewhere else than its config says. Triton's backend appends providers through the
    C API, where such a failure fails the model load: so does this.

    Raises:
        ModelLoadError: naming the providers that did not start and what the session runs on.
    """
    active = list(active)
    missing = [name for name, _ in plan.providers if name not in active]
    if missing:
        hints = "; ".join(f"{name} needs {INSTALL_HINT[name]}" for name in missing if name in INSTALL_HINT)
        raise _error(model, f"onnxruntime could not start {', '.join(missing)} (the session fell "
                     f"back to {', '.join(active) or 'nothing'})" + (f"; {hints}" if hints else ""))


def _unknown(model: str, accelerator: str) -> ModelLoadError:
    return _error(model, f"unknown Execution Accelerator '{accelerator}' is requested")


def _int(model: str, params: dict[str, str], key: str, default: int) -> int:
    return _parse_int(model, key, params[key]) if key in params else default


def _parse_int(model: str, key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise _error(model, f"failed to convert '{key}' value '{value}' to an integer") from None


def _bool(model: str, key: str, value: str) -> bool:
    switch = parse_switch(value)
    if switch is not None:
        return switch
    raise _error(model, f"failed to convert '{key}' value '{value}' to a boolean "
                 "(1/0, true/false, on/off, yes/no)")


def _error(model: str, text: str) -> ModelLoadError:
    return ModelLoadError(f"unable to load model '{model}': {text}")
