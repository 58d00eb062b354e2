"""Fill Triton's defaults into a model config (the config ``/config`` returns).

Follows core ``NormalizeModelConfig`` and ``NormalizeInstanceGroup``
(``model_config_utils.cc``); TRITON_COMPAT 2.2, 2.4, 2.5, 2.9.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from workbench.config.backend_specs import backend_spec

#: default ``sequence_batching.max_sequence_idle_microseconds`` (1 s).
SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000

_Group = mc.ModelInstanceGroup


def normalize_model_config(config: mc.ModelConfig, *, gpu_count: int = 0) -> mc.ModelConfig:
    """Return a copy of ``config`` with Triton's defaults filled.

    Follows Triton: version_policy ``latest { num_versions: 1 }`` when unset;
    ``dynamic_batching`` (and ``sequence_batching.oldest``) with no preferred
    batch size gets ``[max_batch_size]`` when max_batch_size > 0;
    ``sequence_batching.max_sequence_idle_microseconds`` 0 -> 1000000;
    non-ensembles get ``optimization.input_pinned_memory`` /
    ``output_pinned_memory`` ``enable: true`` when unset, and their instance
    groups normalized (see :func:`normalize_instance_groups`). Ensembles get no
    instance group, and a ``model_transaction_policy`` even when empty (Triton's
    ``ValidateEnsembleConfig`` sets it: ``model_transaction_policy {}`` in the config).

    Args:
        config: an auto-completed config (not mutated).
        gpu_count: number of usable GPUs (ids ``0..gpu_count-1``).

    Returns:
        The normalized copy.
    """
    out = mc.ModelConfig()
    out.CopyFrom(config)
    if not out.HasField("version_policy"):
        out.version_policy.latest.num_versions = 1
    if out.HasField("dynamic_batching"):
        _default_preferred(out.dynamic_batching.preferred_batch_size, out.max_batch_size)
    if out.HasField("sequence_batching"):
        batcher = out.sequence_batching
        if batcher.max_sequence_idle_microseconds == 0:
            batcher.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if batcher.HasField("oldest"):
            _default_preferred(batcher.oldest.preferred_batch_size, out.max_batch_size)
    if not is_ensemble(out):
        optimization = out.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True
        normalize_instance_groups(out, gpu_count=gpu_count)
    else:  # Triton's ensemble validation always sets the policy (decoupled when a step is)
        out.model_transaction_policy.SetInParent()
    return out


def normalize_instance_groups(config: mc.ModelConfig, *, gpu_count: int = 0) -> None:
    """Normalize ``config.instance_group`` in place (Triton's ``NormalizeInstanceGroup``).

    No group -> one group named ``<model>``; unnamed groups -> ``<model>_<index>``;
    KIND_AUTO -> KIND_GPU when GPUs exist, every listed gpu id exists and the
    backend can use a GPU, else KIND_CPU; count < 1 -> 1, or 2 for KIND_CPU
    with onnxruntime/tensorflow; KIND_GPU with no gpus -> every GPU. What a
    backend can use and its CPU count come from its row in
    :mod:`workbench.config.backend_specs`.
    Ensembles are left alone.

    Args:
        config: the config to normalize (mutated).
        gpu_count: number of usable GPUs.
    """
    if is_ensemble(config):
        return
    if not config.instance_group:
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == _Group.KIND_AUTO:
            group.kind = _resolve_auto_kind(group, config.backend, gpu_count)
        if group.count < 1:
            group.count = default_instance_count(group.kind, config.backend)
        if group.kind == _Group.KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpu_count))


def default_instance_count(kind: int, backend: str) -> int:
    """Triton's default instance count for a group of ``kind`` on ``backend``.

    Args:
        kind: a ``ModelInstanceGroup.Kind`` value.
        backend: the model's backend name.

    Returns:
        For KIND_CPU the backend row's ``cpu_instance_count`` (Triton's
        ``SetDefaultInstanceCount``: 2 on onnxruntime/tensorflow), else 1.
    """
    spec = backend_spec(backend)
    if kind == _Group.KIND_CPU and spec is not None:
        return spec.cpu_instance_count
    return 1


def is_ensemble(config: mc.ModelConfig) -> bool:
    """True for ensembles (platform ``ensemble`` or ``ensemble_scheduling`` set).

    Args:
        config: any model config.

    Returns:
        Whether Triton treats the model as an ensemble.
    """
    return bool(config.platform == "ensemble" or config.HasField("ensemble_scheduling"))


def _resolve_auto_kind(group: mc.ModelInstanceGroup, backend: str, gpu_count: int) -> int:
    """KIND_AUTO -> KIND_GPU or KIND_CPU."""
    spec = backend_spec(backend)
    if gpu_count <= 0 or spec is None or not spec.gpu_capable:  # the row says GPU-capable
        return int(_Group.KIND_CPU)
    if any(gpu < 0 or gpu >= gpu_count for gpu in group.gpus):
        return int(_Group.KIND_CPU)
    return int(_Group.KIND_GPU)


def _default_preferred(preferred: list[int], max_batch_size: int) -> None:
    """Empty preferred batch sizes -> ``[max_batch_size]`` when batching."""
    if len(preferred) == 0 and max_batch_size > 0:
        preferred.append(max_batch_size)


__all__ = [
    "SEQUENCE_IDLE_DEFAULT_MICROSECONDS",
    "default_instance_count",
    "is_ensemble",
    "normalize_instance_groups",
    "normalize_model_config",
]
