"""Validation of the scheduling choice: dynamic batcher, sequence batcher.

Part of :func:`workbench.config.validate.validate_model_config`; messages are
Triton's (core ``model_config_utils.cc``: ``ValidateModelConfig``,
``Get*SequenceControlProperties``). Ensembles: :mod:`workbench.config.validate_ensemble`.
"""

from __future__ import annotations

import logging
import re
from typing import NoReturn

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig

logger = logging.getLogger(__name__)

_Control = mc.ModelSequenceBatching.Control
_CORRID_TYPES = frozenset(
    {mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING}
)


def check_dynamic_batching(config: mc.ModelConfig) -> None:
    """Preferred sizes, priority levels and preserve_ordering of the dynamic batcher.

    Follows Triton's ``ValidateModelConfig``; a dynamic batcher on a model with
    ``max_batch_size`` 0 is allowed but only logs a warning (it cannot batch).

    Args:
        config: the model config.

    Raises:
        InvalidModelConfig: with Triton's text for the first rule broken.
    """
    if not config.HasField("dynamic_batching"):
        return
    m, batcher = config.name, config.dynamic_batching
    if config.max_batch_size == 0:
        logger.warning(
            "dynamic batching is enabled for model '%s' but max_batch_size is 0; "
            "requests will not be batched",
            m,
        )
    _check_preferred(
        batcher.preferred_batch_size, config.max_batch_size, "dynamic batching preferred size", m
    )
    levels = batcher.priority_levels
    if levels != 0:
        if not 1 <= batcher.default_priority_level <= levels:
            _fail(f"default priority level must be in range [1, {levels}] for {m}")
        if any(not 1 <= level <= levels for level in batcher.priority_queue_policy):
            _fail(f"priority queue policy must have priority level in range [1, {levels}] for {m}")
    if batcher.preserve_ordering:
        if levels > 1:
            _fail(f"Only one priority level is allowed when 'preserve_ordering' is true for {m}")
        policies = [batcher.default_queue_policy, *batcher.priority_queue_policy.values()]
        for policy in policies:
            if (
                policy.default_timeout_microseconds != 0
                and policy.timeout_action == mc.ModelQueuePolicy.DELAY
            ):
                _fail(
                    "Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {m}"
                )


def check_sequence_batching(config: mc.ModelConfig) -> None:
    """Response cache, control tensors and strategy of the sequence batcher.

    Follows Triton's ``ValidateModelConfig`` and ``Get*SequenceControlProperties``.

    Args:
        config: the model config.

    Raises:
        InvalidModelConfig: with Triton's text for the first rule broken.
    """
    if not config.HasField("sequence_batching"):
        return
    m, batcher = config.name, config.sequence_batching
    if config.response_cache.enable:
        _fail(
            f"Response Cache does not currently support model {m} with sequence "
            "batching scheduler. Please disable the response cache."
        )
    _check_controls(batcher, m)
    max_sequence_backlog(config)
    if batcher.HasField("oldest"):
        _check_preferred(
            batcher.oldest.preferred_batch_size,
            config.max_batch_size,
            "sequence batching preferred batch size",
            m,
        )
    if batcher.HasField("direct"):
        utilization = batcher.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            _fail(f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {m}")


def max_sequence_backlog(config: mc.ModelConfig) -> int | None:
    """The sequence backlog bound: model config ``parameters { key: "max_sequence_backlog" }``.

    A workbench extension (Triton's backlog is unbounded): how many new sequences may wait
    for a free sequence slot; further START requests are rejected while all slots are in use.

    Returns:
        The bound (0 = no backlog), or None when the parameter is absent (unbounded).

    Raises:
        InvalidModelConfig: the value is not a non-negative integer.
    """
    if "max_sequence_backlog" not in config.parameters:
        return None
    text = config.parameters["max_sequence_backlog"].string_value.strip()
    if not re.fullmatch(r"[0-9]+", text):
        _fail(
            f"parameter 'max_sequence_backlog' of model '{config.name}' must be a non-negative "
            f"integer (sequences that may wait for a sequence slot), got '{text}'"
        )
    return int(text)


def _check_preferred(sizes: list[int], max_batch_size: int, what: str, m: str) -> None:
    """Preferred batch sizes must be positive and <= max_batch_size."""
    for size in sizes:
        if size <= 0:
            _fail(f"{what} must be positive for {m}")
        if size > max_batch_size:
            _fail(f"{what} must be <= max batch size for {m}")


def _check_controls(batcher: mc.ModelSequenceBatching, m: str) -> None:
    """Each control tensor named once, each control kind once, values well formed."""
    seen_tensors: set[str] = set()
    seen_kinds: set[int] = set()
    for control_input in batcher.control_input:
        if not control_input.name:
            _fail(f"sequence batching control tensor must have a name for {m}")
        if control_input.name in seen_tensors:
            _fail(
                f"sequence batching control tensor '{control_input.name}' is specified "
                f"for multiple control kinds for {m}"
            )
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            kind = _kind_name(control.kind)
            if control.kind in seen_kinds:
                _fail(f"sequence batching specifies multiple {kind} tensors for {m}")
            seen_kinds.add(control.kind)
            if control.kind == _Control.CONTROL_SEQUENCE_CORRID:
                _check_corrid(control, kind, m)
            else:
                _check_boolean_control(control, kind, m)


def _check_boolean_control(control: mc.ModelSequenceBatching.Control, kind: str, m: str) -> None:
    """START / END / READY: exactly one of the *_false_true lists, with 2 entries."""
    lists = {
        "int32_false_true": len(control.int32_false_true),
        "fp32_false_true": len(control.fp32_false_true),
        "bool_false_true": len(control.bool_false_true),
    }
    given = [name for name, size in lists.items() if size]
    if not given:
        _fail(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
            f"or 'bool_false_true' for {kind} for {m}"
        )
    if len(given) > 1:
        _fail(
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind} for {m}"
        )
    if lists[given[0]] != 2:
        _fail(
            f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind} for {m}"
        )


def _check_corrid(control: mc.ModelSequenceBatching.Control, kind: str, m: str) -> None:
    """CORRID: no *_false_true lists, and an integer or string data type."""
    if control.int32_false_true or control.fp32_false_true or control.bool_false_true:
        _fail(
            "sequence batching must not specify either 'int32_false_true', "
            f"'fp32_false_true' or 'bool_false_true' for {kind} for {m}"
        )
    if control.data_type not in _CORRID_TYPES:
        _fail(
            f"unexpected data type for control {kind} for {m}. Allowed data types are "
            "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        )


def _kind_name(kind: int) -> str:
    """Control kind value -> its enum name (the number when unknown)."""
    try:
        return str(_Control.Kind.Name(kind))
    except ValueError:
        return str(kind)


def _fail(message: str) -> NoReturn:
    """Raise the config error (keeps the one-line checks short)."""
    raise InvalidModelConfig(message)


__all__ = ["check_dynamic_batching", "check_sequence_batching", "max_sequence_backlog"]
