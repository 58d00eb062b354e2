"""TensorRT optimization profiles: which ones an instance uses, whether they fit the model
config, and which one runs a given batch. Pure functions over shape tuples (CPU-testable).

Follows Triton's tensorrt_backend: an instance uses the profiles its instance group lists in
``profile`` (strings holding profile indices), else profile 0; each execution uses the most
optimized profile whose min/max ranges hold the batch's input shapes (``GetMostOptimizedProfile``:
the least summed distance to the profile's opt shapes); the config's ``max_batch_size`` must fit
in every profile an instance uses (Triton's "configuration specified max-batch ... but TensorRT
engine only supports max-batch ..."). Error texts are Triton's where it has one
(``ValidateDimension``: "model expected the shape of dimension 1 to be between 1 and 128 but
received 300").
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidArgument, ModelLoadError
from workbench.config.tensorrt_io import EngineTensor, ProfileRange, Shape, format_shape

log = logging.getLogger(__name__)


def instance_profiles(config: mc.ModelConfig, group_name: str, num_profiles: int) -> tuple[int, ...]:
    """The optimization profiles an instance of ``group_name`` uses (``(0,)`` when it names none).

    Raises:
        ModelLoadError: see :func:`profile_indices`.
    """
    group = next((g for g in config.instance_group if g.name == group_name), None)
    return profile_indices(config, list(group.profile) if group is not None else [], num_profiles)


def profile_indices(config: mc.ModelConfig, names: Sequence[str], num_profiles: int) -> tuple[int, ...]:
    """Profile indices from ``instance_group.profile`` strings (``(0,)`` for none); a profile
    listed twice is used once (Triton logs that it is reused).

    Raises:
        ModelLoadError: a profile index the engine does not have (Triton's "configuration
            specified invalid profile 3 . Number of profiles supported by TensorRT engine: 1").
    """
    chosen: list[int] = []
    for name in names:
        index = int(name) if name.isdigit() else -1
        if not 0 <= index < num_profiles:
            raise ModelLoadError(
                f"unable to load model '{config.name}', configuration specified invalid profile "
                f"{name} . Number of profiles supported by TensorRT engine: {num_profiles}"
            )
        if index in chosen:
            log.warning("model '%s': optimization profile %s is listed twice; it is used once",
                        config.name, name)
            continue
        chosen.append(index)
    return tuple(chosen) or (0,)


def check_profiles(
    model: str,
    max_batch_size: int,
    config_dims: Mapping[str, Sequence[int]],
    inputs: Sequence[EngineTensor],
    profiles: Sequence[int],
    free: Collection[str] = (),
) -> None:
    """Check that every profile an instance uses can run what the config allows.

    Args:
        model: the model name, for messages.
        max_batch_size: the config's; > 0 means the first dimension is the batch dimension.
        config_dims: input name -> the config's dims (or reshape), without the batch dim.
        inputs: the engine's inputs (shape tensors are skipped).
        profiles: the profile indices the instance uses.
        free: engine inputs whose shape the config does not give per request: ragged inputs
            (flat, their first dim counts elements) and batch input targets (Triton's ragged
            batching); they are not checked here (a ragged input's one dimension is checked
            against the config by ``check_config_io``).

    Raises:
        ModelLoadError: a profile whose ``max[0]`` is below ``max_batch_size``, or a fixed config
            dim outside the profile's ``[min, max]`` range. A profile whose ``min[0]`` is above 1
            only logs a warning: smaller batches will then fail at execution.
    """
    batched = max_batch_size > 0
    for index in profiles:
        for tensor in inputs:
            if tensor.shape_tensor:
                continue
            span = tensor.profiles[index]
            if tensor.name in free:
                continue  # ragged input / batch input: any size
            if batched:
                _check_batch_range(model, max_batch_size, tensor.name, index, span)
            dims = list(config_dims.get(tensor.name, ()))
            full = ([-1] if batched else []) + [int(d) for d in dims]
            problem = shape_problem(full, span)
            if problem:
                raise ModelLoadError(
                    f"unable to load model '{model}': model configuration specified invalid shape "
                    f"for input '{tensor.name}' for model {model}. Error details: {problem} "
                    f"(optimization profile {index})"
                )


def _check_batch_range(model: str, max_batch_size: int, name: str, index: int,
                       span: ProfileRange) -> None:
    if span.max[0] < max_batch_size:
        wanted = "x".join(str(d) for d in (max_batch_size, *span.max[1:]))
        raise ModelLoadError(
            f"unable to load model '{model}': configuration specified max-batch {max_batch_size} "
            f"but TensorRT engine only supports max-batch {span.max[0]} (optimization profile "
            f"{index}, input '{name}': min {format_shape(span.min)}, opt {format_shape(span.opt)}, "
            f"max {format_shape(span.max)}); rebuild the plan with a larger maximum batch "
            f"(`workbench build-plan --max-batch {max_batch_size}` or --max-shapes "
            f"{name}:{wanted}) or lower max_batch_size to {span.max[0]}"
        )
    if span.min[0] > 1:
        log.warning(
            "model '%s': optimization profile %d accepts batches of %d..%d for input '%s'; "
            "smaller batches (a single request) will fail", model, index, span.min[0],
            span.max[0], name,
        )


def shape_problem(shape: Sequence[int], span: ProfileRange) -> str:
    """Why ``shape`` does not fit ``span`` ("" when it fits); -1 in ``shape`` matches any size.

    Triton's ``ValidateDimension`` texts: "model expected 2 dimensions but received 3
    dimensions", "model expected the shape of dimension 1 to be between 1 and 128 but received
    300".
    """
    if len(shape) != len(span.max):
        return f"model expected {len(span.max)} dimensions but received {len(shape)} dimensions"
    for i, size in enumerate(shape):
        if size != -1 and not span.min[i] <= size <= span.max[i]:
            return (f"model expected the shape of dimension {i} to be between {span.min[i]} and "
                    f"{span.max[i]} but received {size}")
    return ""


def choose_profile(
    model: str, shapes: Mapping[str, Shape], inputs: Sequence[EngineTensor], profiles: Sequence[int]
) -> int:
    """The profile (of ``profiles``) that runs a batch whose inputs have ``shapes``.

    Among the profiles whose ranges hold every input shape, the one with the least summed
    distance to its opt shapes (Triton's ``GetMostOptimizedProfile``); ties go to the first.

    Raises:
        InvalidArgument: no profile fits; names the input, the dimension and the range
            ("input 'x' of model 'm': model expected the shape of dimension 1 to be between 1
            and 128 but received 300 (optimization profile 0)").
    """
    best, best_distance, first_problem = -1, -1, ""
    for index in profiles:
        distance = 0
        for tensor in inputs:
            if tensor.shape_tensor or tensor.name not in shapes:
                continue
            span, shape = tensor.profiles[index], shapes[tensor.name]
            problem = shape_problem(shape, span)
            if problem:
                first_problem = first_problem or (
                    f"input '{tensor.name}' of model '{model}': {problem} (optimization profile "
                    f"{index})")
                distance = -1
                break
            distance += sum(abs(s - o) for s, o in zip(shape, span.opt, strict=True))
        if distance >= 0 and (best < 0 or distance < best_distance):
            best, best_distance = index, distance
    if best < 0:
        raise InvalidArgument(first_problem)
    return best


__all__ = ["check_profiles", "choose_profile", "instance_profiles", "profile_indices", "shape_problem"]
