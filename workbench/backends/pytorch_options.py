"""The PyTorch backend's model-config parameters (Triton's pytorch_backend: INFERENCE_MODE,
DISABLE_OPTIMIZED_EXECUTION, thread counts, ...), parsed once per model version; see
``workbench.backends.pytorch`` for what each one does here."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import ModelLoadError
from workbench.common.switches import parse_switch

log = logging.getLogger(__name__)



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
        switch = parse_switch(params[key])
        if switch is not None:
            return switch
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
