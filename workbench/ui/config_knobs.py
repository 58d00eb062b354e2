"""The config knobs people tune, read from and written into ``config.pbtxt`` text.

:class:`ConfigKnobs` is what the config editor's form controls and the notebook widgets show:
max batch size, dynamic batching (preferred batch sizes, max queue delay in µs, priority
levels), the first instance group's count and kind, and the response cache.
:func:`set_knobs` rewrites only the top-level fields whose value changed, so comments and the
layout of every other line survive (:mod:`workbench.ui.pbtxt_spans`).

Parsing and printing use ``google.protobuf.text_format`` with the ``ModelConfig`` message
``tritonclient`` ships, as the engine does; nothing here validates (the engine's
``validate_model_config_text`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.ui.pbtxt_spans import replace_fields

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: instance group kinds offered by the form (Triton's names)
INSTANCE_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU")
#: the top-level fields :func:`set_knobs` may rewrite
KNOB_FIELDS = ("max_batch_size", "dynamic_batching", "instance_group", "response_cache")


@dataclass(frozen=True)
class ConfigKnobs:
    """The tunable fields of one model config.

    Attributes:
        max_batch_size: largest batch the model accepts (0: no batch dimension).
        dynamic_batching: whether the dynamic batcher is on (``dynamic_batching { }``).
        preferred_batch_sizes: batch sizes the batcher aims for (empty: as large as possible).
        max_queue_delay_us: how long the batcher may hold a request to fill a batch,
            **microseconds** (``max_queue_delay_microseconds``).
        priority_levels: request priority levels of the batcher (0: none).
        instance_count, instance_kind: the first instance group (``KIND_AUTO`` / ``KIND_CPU`` /
            ``KIND_GPU``).
        response_cache: ``response_cache { enable: true }``.
    """

    max_batch_size: int = 0
    dynamic_batching: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    priority_levels: int = 0
    instance_count: int = 1
    instance_kind: str = "KIND_AUTO"
    response_cache: bool = False


class KnobValues(TypedDict, total=False):
    """Some knobs by name, each typed as its :class:`ConfigKnobs` field (the keyword
    arguments of :func:`with_knob`, ``dataclasses.replace`` on a ``ConfigKnobs``)."""

    max_batch_size: int
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    priority_levels: int
    instance_count: int
    instance_kind: str
    response_cache: bool


def parse_text(text: str) -> ModelConfig:
    """``config.pbtxt`` text as a ``ModelConfig``.

    Raises:
        google.protobuf.text_format.ParseError: the text does not parse (line:column in the
            message).
    """
    config = ModelConfig()
    text_format.Parse(text, config)
    return config


def read_knobs(config: ModelConfig) -> ConfigKnobs:
    """The knobs as ``config`` sets them (defaults for what it leaves out)."""
    batcher = config.dynamic_batching
    group = config.instance_group[0] if config.instance_group else None
    return ConfigKnobs(
        max_batch_size=config.max_batch_size,
        dynamic_batching=config.HasField("dynamic_batching"),
        preferred_batch_sizes=tuple(batcher.preferred_batch_size),
        max_queue_delay_us=batcher.max_queue_delay_microseconds,
        priority_levels=batcher.priority_levels,
        instance_count=group.count if group is not None and group.count else 1,
        instance_kind=ModelInstanceGroup.Kind.Name(group.kind) if group is not None else "KIND_AUTO",
        response_cache=config.response_cache.enable,
    )


def apply_knobs(config: ModelConfig, knobs: ConfigKnobs) -> ModelConfig:
    """A copy of ``config`` with ``knobs`` set. Batcher settings turn dynamic batching on;
    a default priority level outside ``1..priority_levels`` becomes the lowest priority
    (``priority_levels``), as Triton requires one in range.

    Raises:
        ValueError: an instance kind Triton does not know.
    """
    updated = ModelConfig()
    updated.CopyFrom(config)
    updated.max_batch_size = knobs.max_batch_size
    wants_batcher = (knobs.dynamic_batching or bool(knobs.preferred_batch_sizes)
                     or knobs.max_queue_delay_us > 0 or knobs.priority_levels > 0)
    if wants_batcher:
        batcher = updated.dynamic_batching
        batcher.SetInParent()
        del batcher.preferred_batch_size[:]
        batcher.preferred_batch_size.extend(knobs.preferred_batch_sizes)
        batcher.max_queue_delay_microseconds = knobs.max_queue_delay_us
        batcher.priority_levels = knobs.priority_levels
        if knobs.priority_levels and not 1 <= batcher.default_priority_level <= knobs.priority_levels:
            batcher.default_priority_level = knobs.priority_levels
        if not knobs.priority_levels:
            batcher.default_priority_level = 0
    else:
        updated.ClearField("dynamic_batching")
    if not updated.instance_group:
        updated.instance_group.add()
    group = updated.instance_group[0]
    group.count = knobs.instance_count
    group.kind = ModelInstanceGroup.Kind.Value(knobs.instance_kind)
    if knobs.response_cache:
        updated.response_cache.enable = True
    else:
        updated.ClearField("response_cache")
    return updated


def set_knobs(text: str, knobs: ConfigKnobs) -> str:
    """``text`` with ``knobs`` applied: only the top-level fields whose value changes are
    rewritten (printed by ``text_format``), every other line is kept as it is.

    Raises:
        google.protobuf.text_format.ParseError: ``text`` does not parse.
        ValueError: an unknown instance kind.
    """
    before = parse_text(text)
    after = apply_knobs(before, knobs)
    changed = {}
    for name in KNOB_FIELDS:
        if _field_text(before, name) != _field_text(after, name):
            changed[name] = _field_text(after, name)
    return replace_fields(text, changed) if changed else text


def with_knob(text: str, **values: Unpack[KnobValues]) -> str:
    """``text`` with some knobs changed by name (``with_knob(text, max_queue_delay_us=100)``).

    Raises:
        As :func:`set_knobs`; TypeError for an unknown knob name.
    """
    return set_knobs(text, replace(read_knobs(parse_text(text)), **values))


def _field_text(config: ModelConfig, name: str) -> str:
    """One top-level field as ``text_format`` prints it ("" when unset)."""
    only = ModelConfig()
    field = ModelConfig.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        getattr(only, name).extend(getattr(config, name))
    elif field.message_type is not None:
        if config.HasField(name):
            getattr(only, name).CopyFrom(getattr(config, name))
    else:
        setattr(only, name, getattr(config, name))
    return text_format.MessageToString(only)


__all__ = [
    "INSTANCE_KINDS",
    "KNOB_FIELDS",
    "ConfigKnobs",
    "KnobValues",
    "apply_knobs",
    "parse_text",
    "read_knobs",
    "set_knobs",
    "with_knob",
]
