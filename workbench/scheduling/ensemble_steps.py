"""An ensemble's steps as its scheduler runs them: the step list, which steps consume each
ensemble tensor (pruned per request to the requested outputs), and the batch-dimension
conversion between steps. Follows core ``ensemble_scheduler.cc`` (``EnsembleInfo``'s
``tensor_to_step_`` / ``tensor_to_prev_step_``, the pruning in ``EnsembleContext``'s
constructor, ``ReshapeTensorDims``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.messages.types import InferenceRequest, InferenceResponse
from workbench.stats.statistics import ComputeTotals

#: ``adapt(config)``: a step's request for the composing model version about to run it,
#: given that version's config (its inputs' batch dimension added or dropped to fit it).
StepAdapt = Callable[[ModelConfig], InferenceRequest]

#: ``step_infer(request, compute_totals, adapt)``: run one composing-model request through
#: the engine (model and version resolved per call, by ``request``'s model name and version;
#: the request sent is ``adapt(resolved config)`` when ``adapt`` is given) and yield its
#: responses as ``Server.infer_stream`` does (one for a non-decoupled model; 0..n for a
#: decoupled one, the last ``final``; a final one without outputs only closes the request),
#: adding its compute durations to ``compute_totals`` on success. Raises the engine's errors
#: (``ModelNotFound`` with "Request for unknown model: ...", ``InvalidArgument``, a backend's
#: error, ...) from the iteration.
StepInfer = Callable[
    [InferenceRequest, ComputeTotals, StepAdapt | None],
    AsyncGenerator[InferenceResponse, None],
]


def batch_reshaped(
    config_dims: Sequence[int], config_batching: bool, tensor_batch: int, shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The shape an ensemble tensor takes where a config expects it (Triton's
    ``EnsembleContext::ReshapeTensorDims``).

    Args:
        config_dims: the receiving input's (or ensemble output's) dims, without batch dim.
        config_batching: the receiving model batches (``max_batch_size > 0``).
        tensor_batch: the batch size the tensor was made with (0: none).
        shape: the tensor's shape.

    Returns:
        ``shape`` unchanged, unless exactly one side batches: ``(1, *shape)`` when the
        receiver batches and ``shape`` matches ``config_dims`` (-1 matching anything); or
        ``shape[1:]`` when the receiver does not batch, the tensor has a batch of 1 and
        ``shape`` does not match ``config_dims``.
    """
    if config_batching == (tensor_batch != 0):
        return shape
    if config_batching:
        return (1, *shape) if _dims_match(config_dims, shape) else shape
    if tensor_batch == 1 and not _dims_match(config_dims, shape):
        return shape[1:]
    return shape


def _dims_match(dims: Sequence[int], shape: Sequence[int]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, equal where neither is -1."""
    return len(dims) == len(shape) and all(
        d == s or d == -1 or s == -1 for d, s in zip(dims, shape, strict=True)
    )


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    """One ``ensemble_scheduling.step``.

    Attributes:
        index: position in the config.
        model_name: the composing model.
        model_version: ``""`` for ``-1`` (latest READY version), else the version number.
        inputs: (composing model input, ensemble tensor) pairs, from ``input_map``.
        outputs: (composing model output, ensemble tensor) pairs, from ``output_map``.
    """

    index: int
    model_name: str
    model_version: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


def ensemble_steps(config: ModelConfig) -> tuple[EnsembleStep, ...]:
    """The steps of an ensemble config (maps in key order)."""
    return tuple(
        EnsembleStep(
            index=index,
            model_name=step.model_name,
            model_version="" if step.model_version == -1 else str(step.model_version),
            inputs=tuple(sorted(step.input_map.items())),
            outputs=tuple(sorted(step.output_map.items())),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    )


#: ensemble tensor -> the indexes of the steps that take it as an input
Consumers = dict[str, frozenset[int]]


class EnsembleGraph:
    """Which steps consume each ensemble tensor, and which step produces it.

    Args:
        config: a validated ensemble config.
    """

    def __init__(self, config: ModelConfig) -> None:
        self.steps = ensemble_steps(config)
        self.outputs = frozenset(io.name for io in config.output)
        consumers: dict[str, set[int]] = {}
        self.producer: dict[str, int] = {}
        for step in self.steps:
            for _, tensor in step.inputs:
                consumers.setdefault(tensor, set()).add(step.index)
            for _, tensor in step.outputs:
                self.producer[tensor] = step.index
        self.consumers: Consumers = {t: frozenset(s) for t, s in consumers.items()}
        self._pruned: dict[frozenset[str], Consumers] = {}

    def consumers_for(self, requested: Collection[str]) -> Consumers:
        """The consumers of each tensor once the steps that lead to no requested output are
        pruned (Triton's backward traversal in ``EnsembleContext``): a step none of whose
        mapped outputs is needed does not run; a tensor is needed when it is a requested
        ensemble output or some step that runs takes it. Cached per set of outputs."""
        wanted = frozenset(requested)
        key = self.outputs - wanted
        if not key:
            return self.consumers
        cached = self._pruned.get(key)
        if cached is not None:
            return cached
        pruned = {t: set(s) for t, s in self.consumers.items()}
        ignored = frozenset(t for t in key if not pruned.get(t))  # unless a step takes it
        needed_outputs = {step.index: len(step.outputs) for step in self.steps}
        while ignored:
            newly: set[str] = set()
            for tensor in ignored:
                index = self.producer.get(tensor)
                if index is None:  # an ensemble input: nothing produces it
                    continue
                needed_outputs[index] -= 1
                if needed_outputs[index] == 0:  # nothing the step makes is needed
                    for _, source in self.steps[index].inputs:
                        pruned[source].discard(index)
                        if not pruned[source] and source not in wanted:
                            newly.add(source)
            ignored = frozenset(newly)
        result = {t: frozenset(s) for t, s in pruned.items()}
        if len(self._pruned) < 64:  # bounded: clients choose the output sets
            self._pruned[key] = result
        return result


__all__ = [
    "Consumers", "EnsembleGraph", "EnsembleStep", "StepAdapt", "StepInfer", "batch_reshaped",
    "ensemble_steps",
]
