"""The config knobs people tune, read from and written into ``config.pbtxt`` text.

:class:`ConfigKnobs` is what the config editor's form and the notebook widgets show: max
batch size, dynamic batching (preferred batch sizes, max queue delay in **µs**, priority
levels), the first instance group's count and kind, the response cache, and the backend's
thread and stream counts (config ``parameters`` under each backend's own names, older names
read too: :data:`BACKEND_PARAMETERS`; 0 = the backend's default, the parameter removed).
:func:`set_knobs` rewrites only the values that changed, keeping comments, indent and list
style (:mod:`workbench.config_edits.pbtxt_edit`).

:func:`knob_reasons` says why a knob does not apply: a sequence-batched model has no dynamic
batcher (Triton's ``scheduling_choice``), so no dynamic batching, priority levels or response
cache, and its queue delay / preferred sizes map to ``sequence_batching.oldest`` (or
``direct.max_queue_delay_microseconds`` with ``minimum_slot_utilization``); an ensemble has
no batcher, instances or backend; a backend parameter of another backend does not exist.
Changing a knob that does not apply raises ``ValueError`` with the reason (nothing written).

Parsing and printing use ``google.protobuf.text_format`` with ``tritonclient``'s
``ModelConfig``, as the engine does; nothing here validates (the engine's
``validate_model_config_text`` does). User view: docs/dashboard.md, the **Config** tab."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup, ModelSequenceBatching

from workbench.config_edits.pbtxt_edit import rewrite_message

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: instance group kinds offered by the form (Triton's names)
INSTANCE_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU")
#: what a person reads for each knob (the form's labels)
KNOB_LABELS = {
    "max_batch_size": "max_batch_size", "dynamic_batching": "dynamic batching",
    "preferred_batch_sizes": "preferred batch sizes", "max_queue_delay_us": "max queue delay (µs)",
    "priority_levels": "priority levels", "instance_count": "instance count",
    "instance_kind": "instance kind", "response_cache": "response cache",
    "intra_op_threads": "intra-op threads", "inter_op_threads": "inter-op threads",
    "streams": "streams",
}
#: backend -> backend knob -> the config ``parameters`` keys the engine reads for it, the
#: current name first (see the module docstring)
BACKEND_PARAMETERS: dict[str, dict[str, tuple[str, ...]]] = {
    "onnxruntime": {"intra_op_threads": ("intra_op_thread_count",),
                    "inter_op_threads": ("inter_op_thread_count",)},
    "pytorch": {"intra_op_threads": ("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
                "inter_op_threads": ("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS")},
    "openvino": {"intra_op_threads": ("INFERENCE_NUM_THREADS", "CPU_THREADS_NUM"),
                 "streams": ("NUM_STREAMS", "CPU_THROUGHPUT_STREAMS")},
}
#: the knobs that are backend parameters
BACKEND_KNOBS = ("intra_op_threads", "inter_op_threads", "streams")
#: platform -> its backend, for configs that name only the platform (Triton's table)
_PLATFORM_BACKENDS = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch"}
#: why the dynamic batcher's knobs do not apply to a sequence-batched model
SEQUENCE_SCHEDULED = ("sequence-batched model: the sequence batcher schedules it, and "
                      "dynamic_batching cannot be set beside sequence_batching")
#: why the queue delay does not apply to a direct-strategy sequence batcher
DIRECT_NO_DELAY = ("sequence batching, direct strategy: it waits for no queue delay unless "
                   "sequence_batching.direct.minimum_slot_utilization is set (or use the "
                   "oldest strategy, which has its own max_queue_delay_microseconds)")
#: why preferred batch sizes do not apply to a direct-strategy sequence batcher
DIRECT_NO_PREFERRED = ("sequence batching, direct strategy: it has no preferred batch sizes "
                       "(the oldest strategy has)")
#: why the response cache does not apply to a sequence-batched model (Triton's rule)
SEQUENCE_NO_CACHE = "sequence-batched model: Triton's response cache does not support sequence batching"
#: why batching knobs do not apply to an ensemble
ENSEMBLE_NO_BATCHER = "an ensemble: its composing models batch, the ensemble has no batcher"
#: why instance knobs do not apply to an ensemble
ENSEMBLE_NO_INSTANCES = "an ensemble: its composing models have instance groups, the ensemble has none"
#: why backend knobs do not apply to an ensemble
ENSEMBLE_NO_BACKEND = ("an ensemble: its composing models have backends and their parameters, "
                       "the ensemble has none")


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
        intra_op_threads, inter_op_threads: threads of the backend's intra-op and inter-op
            thread pools (0: the backend's default), ``parameters`` of the backend's names.
        streams: OpenVINO's ``NUM_STREAMS``, inference streams (0: OpenVINO's default).
    """

    max_batch_size: int = 0
    dynamic_batching: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    priority_levels: int = 0
    instance_count: int = 1
    instance_kind: str = "KIND_AUTO"
    response_cache: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    streams: int = 0


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
    intra_op_threads: int
    inter_op_threads: int
    streams: int


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
    """The knobs as ``config`` sets them (defaults for what it leaves out); for a
    sequence-batched model the queue delay and preferred batch sizes of its strategy."""
    batcher = config.dynamic_batching
    group = config.instance_group[0] if config.instance_group else None
    preferred, delay = tuple(batcher.preferred_batch_size), batcher.max_queue_delay_microseconds
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        preferred = tuple(sequence.oldest.preferred_batch_size)
        delay = (sequence.oldest if sequence.HasField("oldest") else sequence.direct).max_queue_delay_microseconds
    return ConfigKnobs(
        max_batch_size=config.max_batch_size,
        dynamic_batching=config.HasField("dynamic_batching"),
        preferred_batch_sizes=preferred,
        max_queue_delay_us=delay,
        priority_levels=batcher.priority_levels,
        instance_count=group.count if group is not None and group.count else 1,
        instance_kind=ModelInstanceGroup.Kind.Name(group.kind) if group is not None else "KIND_AUTO",
        response_cache=config.response_cache.enable,
        **{name: _parameter_count(config, keys) for name, keys in _parameters_of(config).items()},
    )


def backend_of(config: ModelConfig) -> str:
    """The backend ``config`` names (its ``backend``, else the backend of its ``platform``:
    ``onnxruntime_onnx`` -> ``onnxruntime``), "" for none or another platform."""
    return config.backend or _PLATFORM_BACKENDS.get(config.platform, "")


def _parameters_of(config: ModelConfig) -> dict[str, tuple[str, ...]]:
    """The backend knobs that apply to ``config`` -> their parameter keys."""
    if _is_ensemble(config):
        return {}
    return BACKEND_PARAMETERS.get(backend_of(config), {})


def _parameter_count(config: ModelConfig, keys: tuple[str, ...]) -> int:
    """The count the first of ``keys`` in ``config.parameters`` sets; 0 for none, or for a
    value that is not a count."""
    for key in keys:
        if key in config.parameters:
            try:
                return max(0, int(config.parameters[key].string_value))
            except ValueError:
                return 0
    return 0


def _is_ensemble(config: ModelConfig) -> bool:
    return config.HasField("ensemble_scheduling") or config.platform == "ensemble"


def knob_reasons(config: ModelConfig) -> dict[str, str]:
    """Knob name (a :class:`ConfigKnobs` field) -> why it does not apply to ``config``; a
    knob not listed applies (see the module docstring)."""
    return {**_scheduling_reasons(config), **_backend_reasons(config)}


def _backend_reasons(config: ModelConfig) -> dict[str, str]:
    if _is_ensemble(config):
        return dict.fromkeys(BACKEND_KNOBS, ENSEMBLE_NO_BACKEND)
    backend, applies = backend_of(config), _parameters_of(config)
    if backend:
        who = f"the {backend} backend"
    else:
        who = f"platform {config.platform}" if config.platform else "a config that names no backend or platform"
    reasons = {}
    for knob in BACKEND_KNOBS:
        if knob not in applies:
            having = [name for name, knobs in BACKEND_PARAMETERS.items() if knob in knobs]
            listed = " and ".join((", ".join(having[:-1]), having[-1])) if len(having) > 1 else having[0]
            reasons[knob] = (f"{who} has no {KNOB_LABELS[knob]} parameter: it is a knob of "
                             f"{listed} models only")
    return reasons


def _scheduling_reasons(config: ModelConfig) -> dict[str, str]:
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        reasons = {"dynamic_batching": SEQUENCE_SCHEDULED, "priority_levels": SEQUENCE_SCHEDULED,
                   "response_cache": SEQUENCE_NO_CACHE}
        if not sequence.HasField("oldest"):
            reasons["preferred_batch_sizes"] = DIRECT_NO_PREFERRED
            if not sequence.direct.minimum_slot_utilization:
                reasons["max_queue_delay_us"] = DIRECT_NO_DELAY
        return reasons
    if _is_ensemble(config):
        batching = ("dynamic_batching", "preferred_batch_sizes", "max_queue_delay_us", "priority_levels")
        return {**dict.fromkeys(batching, ENSEMBLE_NO_BATCHER),
                **dict.fromkeys(("instance_count", "instance_kind"), ENSEMBLE_NO_INSTANCES)}
    return {}


def apply_knobs(config: ModelConfig, knobs: ConfigKnobs) -> ModelConfig:
    """A copy of ``config`` with ``knobs`` set. Batcher settings turn dynamic batching on;
    a default priority level outside ``1..priority_levels`` becomes the lowest priority
    (``priority_levels``), as Triton requires one in range. On a sequence-batched model the
    queue delay and preferred sizes go to its strategy (see the module docstring).

    Raises:
        ValueError: a knob that does not apply to ``config`` is changed (the message says
            why, :func:`knob_reasons`); an instance kind Triton does not know; a negative
            thread or stream count.
    """
    reasons = knob_reasons(config)
    current = read_knobs(config)
    for name, reason in reasons.items():
        if getattr(knobs, name) != getattr(current, name):
            raise ValueError(f"{KNOB_LABELS[name]} does not apply to model '{config.name}': {reason}")
    for name in BACKEND_KNOBS:
        if getattr(knobs, name) < 0:
            raise ValueError(f"{KNOB_LABELS[name]} must be >= 0 (0: the backend's default), "
                             f"got {getattr(knobs, name)}")
    updated = ModelConfig()
    updated.CopyFrom(config)
    updated.max_batch_size = knobs.max_batch_size
    if config.HasField("sequence_batching"):
        _apply_sequence(updated.sequence_batching, knobs, reasons)
    elif "dynamic_batching" not in reasons:
        _apply_dynamic(updated, knobs)
    if "instance_count" not in reasons:
        _apply_instances(updated, knobs)
    if knobs.response_cache:
        updated.response_cache.enable = True
    else:
        updated.ClearField("response_cache")
    for name, keys in _parameters_of(config).items():
        if getattr(knobs, name) != getattr(current, name):  # else as written, e.g. "AUTO"
            _set_parameter(updated, keys, getattr(knobs, name))
    return updated


def _set_parameter(updated: ModelConfig, keys: tuple[str, ...], count: int) -> None:
    """``count`` under the first of ``keys`` the config has (else the first), its other
    spellings removed; 0 removes them all (the backend's default)."""
    written = [key for key in keys if key in updated.parameters]
    for key in written:
        del updated.parameters[key]
    if count:
        updated.parameters[(written or list(keys))[0]].string_value = str(count)


def _apply_dynamic(updated: ModelConfig, knobs: ConfigKnobs) -> None:
    wants_batcher = (knobs.dynamic_batching or bool(knobs.preferred_batch_sizes)
                     or knobs.max_queue_delay_us > 0 or knobs.priority_levels > 0)
    if not wants_batcher:
        updated.ClearField("dynamic_batching")
        return
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


def _apply_sequence(sequence: ModelSequenceBatching, knobs: ConfigKnobs, reasons: dict[str, str]) -> None:
    """The queue delay and preferred sizes into the strategy that has them."""
    if sequence.HasField("oldest"):
        del sequence.oldest.preferred_batch_size[:]
        sequence.oldest.preferred_batch_size.extend(knobs.preferred_batch_sizes)
        sequence.oldest.max_queue_delay_microseconds = knobs.max_queue_delay_us
    elif "max_queue_delay_us" not in reasons:
        sequence.direct.max_queue_delay_microseconds = knobs.max_queue_delay_us


def _apply_instances(updated: ModelConfig, knobs: ConfigKnobs) -> None:
    """The first instance group's count and kind (none added for the defaults)."""
    if not updated.instance_group:
        if (knobs.instance_count, knobs.instance_kind) == (1, "KIND_AUTO"):
            return
        updated.instance_group.add()
    group = updated.instance_group[0]
    group.count = knobs.instance_count
    group.kind = ModelInstanceGroup.Kind.Value(knobs.instance_kind)


def set_knobs(text: str, knobs: ConfigKnobs) -> str:
    """``text`` with ``knobs`` applied: only the values that change are rewritten, every
    comment, indent and list style is kept (:func:`~workbench.config_edits.pbtxt_edit.rewrite_message`).

    Raises:
        google.protobuf.text_format.ParseError: ``text`` does not parse.
        ValueError: a knob that does not apply to the model is changed; an unknown instance
            kind.
    """
    before = parse_text(text)
    after = apply_knobs(before, knobs)
    return rewrite_message(text, before, after) if after != before else text


def with_knob(text: str, **values: Unpack[KnobValues]) -> str:
    """``text`` with some knobs changed by name (``with_knob(text, max_queue_delay_us=100)``).

    Raises:
        As :func:`set_knobs`; TypeError for an unknown knob name.
    """
    return set_knobs(text, replace(read_knobs(parse_text(text)), **values))


__all__ = [
    "BACKEND_KNOBS",
    "BACKEND_PARAMETERS",
    "INSTANCE_KINDS",
    "KNOB_LABELS",
    "ConfigKnobs",
    "KnobValues",
    "apply_knobs",
    "backend_of",
    "knob_reasons",
    "parse_text",
    "read_knobs",
    "set_knobs",
    "with_knob",
]
