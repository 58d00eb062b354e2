"""Validate a model config the way Triton does, with Triton's messages.

Follows core ``model_config_utils.cc`` (``ValidateModelConfig``,
``ValidateModelIOConfig``, ``ValidateIOShape``, ``ValidateBatchIO``,
``ValidateInstanceGroup``) and the directory-name check of the repository
manager. Scheduler checks live in :mod:`workbench.config.validate_scheduling`, ensemble
checks in :mod:`workbench.config.validate_ensemble`, ``model_warmup`` checks in
:mod:`workbench.config.validate_warmup`.
Works on configs before or after :func:`normalize_model_config`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NoReturn, TypeAlias

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig
from workbench.config.backend_specs import backend_spec, served_backend_specs
from workbench.config.validate_ensemble import check_ensemble
from workbench.config.validate_scheduling import check_dynamic_batching, check_sequence_batching
from workbench.config.validate_warmup import check_model_warmup

#: accepted by default beside the backend table's served rows (Triton's identity backend, ensembles).
ALWAYS_KNOWN = frozenset({"identity", "ensemble"})
TENSORRT_PLATFORM = "tensorrt_plan"
WILDCARD_DIM = -1

_Group = mc.ModelInstanceGroup
_IO: TypeAlias = "mc.ModelInput | mc.ModelOutput"


def validate_model_config(
    config: mc.ModelConfig,
    model_name: str,
    *,
    known_backends: Collection[str] | None = None,
    gpu_count: int | None = None,
) -> None:
    """Check a model config; raise on the first rule it breaks.

    Follows Triton's ``ValidateModelConfig`` + ``ValidateModelIOConfig`` +
    ``ValidateInstanceGroup`` and uses Triton's messages (TRITON_COMPAT §2.8),
    e.g. "model configuration must specify 'name'", "'max_batch_size' must be
    non-negative value for m", "dynamic batching preferred size must be <= max
    batch size for m". Beyond Triton: duplicate input/output names, version
    policies that select nothing, negative instance counts and backends this
    server cannot run are rejected here rather than at load time.

    Args:
        config: the auto-completed (optionally normalized) config.
        model_name: the model's directory name; ``config.name`` must equal it.
        known_backends: backends the server can run (``"ensemble"`` enables
            ensembles); None = :func:`default_known_backends`.
        gpu_count: GPUs present, to check KIND_GPU groups' gpu ids; None skips
            device checks (KIND_GPU without GPUs is then the engine's call).

    Raises:
        InvalidModelConfig: naming the model and the offending field.
    """
    _check_name(config, model_name)
    _check_platform_backend(
        config, default_known_backends() if known_backends is None else known_backends
    )
    if config.max_batch_size < 0:
        _fail(f"'max_batch_size' must be non-negative value for {config.name}")
    _check_version_policy(config)
    _check_ios(config)
    check_dynamic_batching(config)
    check_sequence_batching(config)
    check_ensemble(config)
    check_model_warmup(config)
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        _fail(
            f"Response Cache does not currently support model {config.name} with "
            "'decoupled' transaction policy. Please disable the response cache."
        )
    _check_instance_groups(config, gpu_count)
    _check_model_metrics(config)


def default_known_backends() -> frozenset[str]:
    """The backends validation accepts when the caller names none: the served rows of the
    backend table (:mod:`workbench.config.backend_specs`) plus :data:`ALWAYS_KNOWN`."""
    return frozenset(spec.name for spec in served_backend_specs()) | ALWAYS_KNOWN


def _check_name(config: mc.ModelConfig, model_name: str) -> None:
    """Name present and equal to the directory name."""
    if not config.name:
        _fail("model configuration must specify 'name'")
    if config.name != model_name:
        _fail(
            f"unexpected directory name '{model_name}' for model '{config.name}', "
            "directory name must equal model name"
        )


def _check_platform_backend(config: mc.ModelConfig, known: Collection[str]) -> None:
    """Backend/platform present, consistent, and servable."""
    m, platform, backend = config.name, config.platform, config.backend
    if not platform and not backend:
        _fail(f"must specify 'platform' or 'backend' for '{m}'")
    if not backend and platform != "ensemble":
        _fail(f"unexpected platform type '{platform}' for {m}")
    if backend and platform == "ensemble":
        _fail(f"Ensemble model '{m}' must have platform type 'ensemble' and empty backend type")
    spec = backend_spec(backend) if backend else None
    # a row with platforms fixes them (Triton's ``GetBackendType``); others accept any platform
    if spec is not None and spec.platforms and platform not in spec.platforms:
        _fail(f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}")
    if platform == "ensemble" and "ensemble" not in known:
        _fail("ensemble scheduling not supported")
    if backend and backend not in known:
        _fail(
            f"unable to find backend library for backend '{backend}', try specifying "
            "runtime on the model configuration."
        )


def _check_version_policy(config: mc.ModelConfig) -> None:
    """A version policy must be able to select at least one version."""
    if not config.HasField("version_policy"):
        return  # normalization fills latest 1
    policy = config.version_policy
    prefix = (
        f"at least one version must be available under the version policy of model '{config.name}'"
    )
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest" and policy.latest.num_versions < 1:
        _fail(f"{prefix}: 'version_policy.latest.num_versions' must be >= 1")
    if choice == "specific" and not policy.specific.versions:
        _fail(f"{prefix}: 'version_policy.specific.versions' is empty")


def _check_ios(config: mc.ModelConfig) -> None:
    """Inputs, outputs and batch inputs/outputs (Triton's ``ValidateModelIOConfig``)."""
    m = config.name
    for prefix, ios in (("model input ", config.input), ("model output ", config.output)):
        seen: set[str] = set()
        for io in ios:
            _check_io(io, prefix, config, m)
            if io.name in seen:
                _fail(f"{prefix}'{io.name}' is specified more than once for {m}")
            seen.add(io.name)
    _check_batch_ios(config, m)


def _check_io(io: _IO, prefix: str, config: mc.ModelConfig, m: str) -> None:
    """One input or output: name, data type, dims, reshape, format, shape tensor."""
    if not io.name:
        _fail(f"{prefix}must specify 'name' for {m}")
    where = f"{prefix}'{io.name}' "
    if io.data_type == mc.TYPE_INVALID:
        _fail(f"{where}must specify 'data_type' for {m}")
    if io.data_type not in mc.DataType.values():
        _fail(f"{where}has unknown 'data_type' value {io.data_type} for {m}")
    if not io.dims:
        _fail(f"{where}must specify 'dims' for {m}")
    _check_shape(io, where, config.max_batch_size, m)
    is_trt = config.platform == TENSORRT_PLATFORM
    image_formats = (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)
    if isinstance(io, mc.ModelInput) and io.format in image_formats and len(io.dims) != 3:
        _fail(f"model input NHWC/NCHW require 3 dims for {m}")
    if io.is_shape_tensor and not is_trt:
        _fail(f"shape tensors are only supported for TensorRT platform for {m}")
    if io.is_non_linear_format_io:
        if not is_trt:
            _fail(f"Non-linear IO format is only supported for the TensorRT platform for {m}")
        if len(io.dims) != 3:
            kind = "input" if isinstance(io, mc.ModelInput) else "output"
            _fail(f"Non-linear IO format {kind} requires 3 dims for {m}")


def _check_shape(io: _IO, where: str, max_batch_size: int, m: str) -> None:
    """Dims and reshape (Triton's ``ValidateIOShape``)."""
    variable = f"{WILDCARD_DIM} to indicate a variable-size dimension"
    if io.HasField("reshape") and not io.reshape.shape and max_batch_size == 0:
        _fail(
            f"{where}cannot have empty reshape for non-batching model as scalar tensors "
            f"are not supported for {m}"
        )
    if any(d < 1 and d != WILDCARD_DIM for d in io.dims):
        _fail(f"{where}dimension must be integer >= 1, or {variable} for {m}")
    if not io.HasField("reshape"):
        return
    if any(d < 1 and d != WILDCARD_DIM for d in io.reshape.shape):
        _fail(f"{where}reshape dimensions must be integer >= 1, or {variable} for {m}")
    dims_size, reshape_size = _element_count(io.dims), _element_count(io.reshape.shape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        _fail(f"{where}has different size for dims and reshape for {m}")
    if dims_size == WILDCARD_DIM:
        dims_chunks, reshape_chunks = _chunks(io.dims), _chunks(io.reshape.shape)
        if len(dims_chunks) != len(reshape_chunks):
            _fail(
                f"{where}has different number of variable-size dimensions for dims and "
                f"reshape for {m}"
            )
        if dims_chunks != reshape_chunks:
            _fail(f"{where}has different size for dims and reshape for {m}")


def _element_count(dims: Iterable[int]) -> int:
    """Triton's ``GetElementCount``: -1 if any dim is variable, 0 for no dims, else the product."""
    count = 0
    for dim in dims:
        if dim == WILDCARD_DIM:
            return WILDCARD_DIM
        count = dim if count == 0 else count * dim
    return count


def _chunks(dims: Iterable[int]) -> list[int]:
    """Products of the fixed dims between variable-size dims ([2, 4, -1, 6] -> [8, 6])."""
    chunks, current = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            chunks.append(current)
            current = 1
        else:
            current *= dim
    return [*chunks, current]


def _check_batch_ios(config: mc.ModelConfig, m: str) -> None:
    """Batch inputs/outputs (Triton's ``ValidateBatchIO``)."""
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    for batch_input in config.batch_input:
        kind = mc.BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            got = len(batch_input.source_input)
            _fail(f"batch input kind '{kind}' expects 1 source input, got {got} for {m}")
        if batch_input.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            _fail(f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {m}")
        _check_sources(batch_input.source_input, inputs, m)
    for batch_output in config.batch_output:
        kind = mc.BatchOutput.Kind.Name(batch_output.kind)
        if len(batch_output.source_input) != 1:
            got = len(batch_output.source_input)
            _fail(f"batch output kind '{kind}' expects 1 source input, got {got} for {m}")
        _check_sources(batch_output.source_input, inputs, m)
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                _fail(f"unknown target output name '{target}' for {m}")
            if target in targets:
                _fail(f"target output name '{target}' can only be specified once for {m}")
            targets.add(target)


def _check_sources(sources: Iterable[str], inputs: set[str], m: str) -> None:
    """Every source input of a batch input/output names a model input."""
    for source in sources:
        if source not in inputs:
            _fail(f"unknown source input name '{source}' for {m}")


def _check_instance_groups(config: mc.ModelConfig, gpu_count: int | None) -> None:
    """Kinds, counts, gpus and profiles (Triton's ``ValidateInstanceGroup``)."""
    m = config.name
    for group in config.instance_group:
        where = f"instance group {group.name} of model {m}"
        if group.kind not in _Group.Kind.values():
            _fail(f"{where} has unexpected kind {group.kind}")
        kind = _Group.Kind.Name(group.kind)
        if group.count < 0:
            _fail(f"{where} must specify a non-negative 'count', got {group.count}")
        if group.gpus and group.kind in (_Group.KIND_CPU, _Group.KIND_MODEL):
            _fail(f"{where} has kind {kind} but specifies one or more GPUs")
        if group.kind == _Group.KIND_GPU and gpu_count is not None:
            _check_gpu_ids(group, where, gpu_count)
        if group.profile:
            _check_profiles(group, where, config.platform)


def _check_gpu_ids(group: mc.ModelInstanceGroup, where: str, gpu_count: int) -> None:
    """KIND_GPU: GPUs exist and every listed id is one of them."""
    if gpu_count <= 0:
        _fail(f"{where} has kind KIND_GPU but no GPUs are available")
    for gpu in group.gpus:
        if not 0 <= gpu < gpu_count:
            available = ", ".join(str(i) for i in range(gpu_count))
            _fail(
                f"{where} specifies invalid or unsupported gpu id {gpu}. "
                f"GPUs available are: {available}"
            )


def _check_profiles(group: mc.ModelInstanceGroup, where: str, platform: str) -> None:
    """``profile`` only for TensorRT, each a non-negative integer string."""
    if platform != TENSORRT_PLATFORM:
        _fail(
            f"{where} and platform {platform} specifies profile field which is only "
            "supported for TensorRT models"
        )
    for profile in group.profile:
        if not (profile.isascii() and profile.isdigit()):
            _fail(
                f"{where} and platform {platform} specifies invalid profile {profile}. "
                "The field should contain the string representation of a non-negative integer."
            )


def _check_model_metrics(config: mc.ModelConfig) -> None:
    """Custom metric controls are complete (Triton's ``ValidateModelMetrics``)."""
    for control in config.model_metrics.metric_control:
        if not control.HasField("metric_identifier"):
            _fail(f"metric control must specify 'metric_identifier' for {config.name}")
        if not control.metric_identifier.family:
            _fail(f"metric identifier must specify non-empty 'family' for {config.name}")
        if not control.HasField("histogram_options"):
            _fail(f"metric control must specify 'histogram_options' for {config.name}")
        if not control.histogram_options.buckets:
            _fail(f"histogram options must specify non-empty 'buckets' for {config.name}")


def _fail(message: str) -> NoReturn:
    """Raise the config error (keeps the one-line checks short)."""
    raise InvalidModelConfig(message)


__all__ = ["ALWAYS_KNOWN", "default_known_backends", "validate_model_config"]
