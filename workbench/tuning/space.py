"""The search space of a tuning run: which config knobs take which values, and the load axis.

A :class:`SearchSpace` maps knob names to the values to try. Knob names are the fields of
:class:`workbench.config_edits.knobs.ConfigKnobs` (``instance_count``, ``max_batch_size``,
``preferred_batch_sizes``, ``max_queue_delay_us`` (**microseconds**), ``dynamic_batching``,
and the backend knobs where the model's backend has them); for an ensemble, the knobs of a
composing model are written ``model/knob`` (``tokenizer/instance_count``). A
:class:`Setting` is one point of the space: a value for each knob of the space.

The text form (the CLI's ``--space``, the Tuning tab's field) is ``knob=v1,v2 knob=...``;
``preferred_batch_sizes`` takes sets separated by ``|`` with ``none`` for no preference
(``preferred_batch_sizes=none|4,8``); switches take ``true`` / ``false``.

:func:`default_space` derives a space from the model's config and the machine, the way
Triton's Model Analyzer guide reasons: instance counts up to the cores (up to what GPU
memory allows with a GPU), ``max_batch_size`` in powers of two up to the model's own (at
least 16, at most 128) when the model batches, dynamic batching on, queue delays of none and
about one execution, and, for backends whose threads matter, their intra-op threads.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.switches import parse_switch
from workbench.config_edits.knobs import ConfigKnobs, knob_reasons, read_knobs
from workbench.perf import LoadLevel, levels_from_range
from workbench.tuning.machine import Machine

#: the knob names a space may name (for an ensemble's steps, after ``model/``)
KNOB_NAMES = tuple(f.name for f in fields(ConfigKnobs))
#: the most settings one space may hold (a brute-force run measures each at several loads)
MAX_SETTINGS = 512


def knob_of(key: str) -> tuple[str | None, str]:
    """``"tokenizer/instance_count"`` -> ``("tokenizer", "instance_count")``;
    ``"instance_count"`` -> ``(None, "instance_count")``."""
    model, sep, knob = key.rpartition("/")
    return (model if sep else None), knob


@dataclass(frozen=True, slots=True)
class Setting:
    """One config setting: a value per knob, in the order of the space.

    Attributes:
        values: ``(key, value)`` pairs; a key is a knob name or ``model/knob``.
    """

    values: tuple[tuple[str, object], ...]

    @property
    def label(self) -> str:
        """``instance_count=2 max_batch_size=8`` (how plots, tables and resume files name it)."""
        return " ".join(f"{k}={show_value(v)}" for k, v in self.values) or "served config"

    def as_dict(self) -> dict[str, object]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.values}

    def get(self, key: str, default: object = None) -> object:
        return dict(self.values).get(key, default)

    def by_model(self, model: str) -> dict[str, dict[str, object]]:
        """The knob values per model: ``{model: {knob: value}}``; plain knob names belong to
        ``model`` (the tuned model), ``step/knob`` to that step."""
        out: dict[str, dict[str, object]] = {}
        for key, value in self.values:
            owner, knob = knob_of(key)
            out.setdefault(owner or model, {})[knob] = value
        return out

    def with_value(self, key: str, value: object) -> Setting:
        return Setting(tuple((k, value if k == key else v) for k, v in self.values))

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> Setting:
        return cls(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items()))


def show_value(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class SearchSpace:
    """Knob -> the values to try, and the load levels to measure each setting at.

    Attributes:
        axes: key (knob or ``model/knob``) -> values, in the order they are tried (the first
            value of each axis is the starting point of a quick search).
        levels: the load axis (concurrency or request rate), increasing.
        served: the served config's value of every key (the baseline setting, measured
            first by every strategy).
    """

    axes: Mapping[str, tuple[object, ...]]
    levels: tuple[LoadLevel, ...]
    served: Mapping[str, object] = field(default_factory=dict)

    def settings(self) -> list[Setting]:
        """Every valid setting (the product of the axes, less the combinations Triton would
        refuse: a preferred batch size above ``max_batch_size``; a queue delay or preferred
        sizes with dynamic batching off), the served one first when it is in the space."""
        keys = list(self.axes)
        found = [Setting(tuple(zip(keys, combo, strict=True)))
                 for combo in itertools.product(*(self.axes[k] for k in keys))]
        valid = [s for s in found if valid_setting(s)]
        baseline = self.baseline()
        if baseline in valid:
            valid.remove(baseline)
            valid.insert(0, baseline)
        return valid

    def baseline(self) -> Setting:
        """The served config as a setting of this space (its values, where the space has the
        key; the first value of the axis otherwise)."""
        return Setting(tuple((k, self.served.get(k, values[0])) for k, values in self.axes.items()))

    def neighbours(self, setting: Setting) -> list[Setting]:
        """The valid settings one step away along one axis (the next lower or higher value;
        from a value off the axis - the served config's, when the space leaves it out - the
        nearest value below and above it, or every value of an axis without an order)."""
        out = []
        for key, values in self.axes.items():
            current = setting.get(key)
            for value in _steps_from(current, values):
                other = setting.with_value(key, value)
                if valid_setting(other):
                    out.append(other)
        return out

    def size(self) -> int:
        return len(self.settings())

    def text(self) -> str:
        """The axes in the text form :func:`parse_space` reads (``knob=v1,v2 ...``)."""
        return " ".join(axis_text(k, vs) for k, vs in self.axes.items())

    def levels_text(self) -> str:
        """``concurrency 1, 2, 4`` (the load axis)."""
        mode = self.levels[0].mode if self.levels else "concurrency"
        return f"{mode.replace('_', ' ')} {', '.join(f'{lv.value:g}' for lv in self.levels)}"

    def as_dict(self) -> dict:
        return {"axes": {k: [list(v) if isinstance(v, tuple) else v for v in vs] for k, vs in self.axes.items()},
                "levels": [{"mode": lv.mode, "value": lv.value} for lv in self.levels],
                "served": {k: list(v) if isinstance(v, tuple) else v for k, v in self.served.items()}}


def _steps_from(current: object, values: tuple[object, ...]) -> list[object]:
    """The values of an axis one step from ``current`` (see :meth:`SearchSpace.neighbours`)."""
    if current in values:
        i = values.index(current)
        return [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]
    try:
        below = [v for v in values if v < current]  # type: ignore[operator]
        above = [v for v in values if v > current]  # type: ignore[operator]
    except TypeError:  # no order (preferred batch size sets against None): all of them
        return list(values)
    return [*([max(below)] if below else []), *([min(above)] if above else [])]  # type: ignore[type-var]


def axis_text(key: str, values: Iterable[object]) -> str:
    """One axis as ``knob=v1,v2`` (preferred batch size sets separated by ``|``)."""
    sep = "|" if key.endswith("preferred_batch_sizes") else ","
    return f"{key}={sep.join(show_value(v) for v in values)}"


def valid_setting(setting: Setting) -> bool:
    """Whether Triton would load the setting (per model: preferred sizes within
    ``max_batch_size``; no batcher fields with dynamic batching off; counts >= 1)."""
    for knobs in setting.by_model("").values():
        max_batch = knobs.get("max_batch_size")
        preferred = knobs.get("preferred_batch_sizes") or ()
        if isinstance(max_batch, int) and preferred and max(preferred) > max_batch:  # type: ignore[call-overload]
            return False
        if knobs.get("dynamic_batching") is False and (preferred or knobs.get("max_queue_delay_us")):
            return False
        if isinstance(knobs.get("instance_count"), int) and knobs["instance_count"] < 1:  # type: ignore[operator]
            return False
    return True


def parse_space(text: str, levels: Iterable[LoadLevel] = (), served: Mapping[str, object] | None = None
                ) -> SearchSpace:
    """A space from its text form (see the module docstring).

    Raises:
        ValueError: a pair without ``=``, an unknown knob, a value of the wrong kind, a key
            named twice, an empty axis, or more than :data:`MAX_SETTINGS` settings.
    """
    axes: dict[str, tuple[object, ...]] = {}
    for pair in text.split():
        key, sep, raw = pair.partition("=")
        if not sep or not raw:
            raise ValueError(f"'{pair}' is not knob=v1,v2")
        _, knob = knob_of(key)
        if knob not in KNOB_NAMES:
            raise ValueError(f"unknown knob '{knob}' (one of {', '.join(KNOB_NAMES)})")
        if key in axes:
            raise ValueError(f"'{key}' is named twice")
        axes[key] = tuple(dict.fromkeys(parse_values(knob, raw)))
    space = SearchSpace(axes, tuple(levels), dict(served or {}))
    count = space.size()
    if count > MAX_SETTINGS:
        raise ValueError(f"{count} settings: at most {MAX_SETTINGS} (narrow an axis)")
    if axes and count == 0:
        raise ValueError("no valid setting in the space (preferred batch sizes above every "
                         "max_batch_size, or batcher fields with dynamic_batching=false)")
    return space


def parse_values(knob: str, raw: str) -> list[object]:
    """The values of one axis (``raw`` is the text after ``=``).

    Raises:
        ValueError: a value of the wrong kind for ``knob``.
    """
    if knob == "preferred_batch_sizes":
        out: list[object] = []
        for part in raw.split("|"):
            if part in ("none", ""):
                out.append(())
                continue
            sizes = tuple(_int(knob, v, 1) for v in part.split(",") if v)
            out.append(tuple(sorted(set(sizes))))
        return out
    if knob in ("dynamic_batching", "response_cache"):
        values: list[object] = [parse_switch(v) for v in raw.split(",")]
        if any(v is None for v in values):
            raise ValueError(f"{knob} takes true or false, got '{raw}'")
        return values
    if knob == "instance_kind":
        return list(raw.split(","))
    least = 1 if knob == "instance_count" else 0
    return [_int(knob, v, least) for v in re.split(r",", raw) if v]


def _int(knob: str, raw: str, least: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{knob}: '{raw}' is not an integer") from None
    if value < least:
        raise ValueError(f"{knob} must be >= {least}, got {value}")
    return value


def served_values(config: ModelConfig, keys: Iterable[str]) -> dict[str, object]:
    """The served config's value of each (plain) knob key."""
    knobs = read_knobs(config)
    return {k: getattr(knobs, k) for k in keys if "/" not in k and hasattr(knobs, k)}


def default_levels(machine: Machine, mode: str = "concurrency") -> tuple[LoadLevel, ...]:
    """Concurrency 1, 2, 4, ... up to 8 x the cores (at least 16, at most 128)."""
    top = min(max(16, 8 * machine.cores), 128)
    if mode == "request_rate":
        raise ValueError("a request-rate axis has no default: name the rates (--request-rate-range)")
    values, c = [], 1
    while c <= top:
        values.append(LoadLevel.concurrency(c))
        c *= 2
    return tuple(values)


def levels_from_text(mode: str, text: str) -> tuple[LoadLevel, ...]:
    """``1:16`` (doubling, as Model Analyzer's concurrency search) or ``1:16:4`` (a linear
    step, perf_analyzer's range) or ``1,2,8``: increasing load levels.

    Raises:
        ValueError / PerfError: a malformed range or value.
    """
    parts = text.split(":")
    if ":" in text and len(parts) == 2:
        start, end = _number(parts[0]), _number(parts[1])
        if start <= 0 or end < start:
            raise ValueError(f"'{text}': need 0 < start <= end")
        values, v = [], start
        while v <= end + 1e-9:
            values.append(v)
            v *= 2
        return tuple(_level(mode, v) for v in values)
    if ":" in text:
        return tuple(sorted(levels_from_range(mode, text), key=lambda lv: lv.value))  # type: ignore[arg-type]
    return tuple(sorted((_level(mode, _number(v)) for v in re.split(r"[,\s]+", text.strip()) if v),
                        key=lambda lv: lv.value))


def _number(word: str) -> float:
    try:
        return float(word)
    except ValueError:
        raise ValueError(f"'{word.strip()}' is not a number (levels: 1,2,8 or start:end or "
                         "start:end:step)") from None


def _level(mode: str, value: float) -> LoadLevel:
    if mode == "concurrency":
        return LoadLevel.concurrency(int(value))
    return LoadLevel(mode, value)  # type: ignore[arg-type]


def default_space(config: ModelConfig, machine: Machine, levels: tuple[LoadLevel, ...] = ()) -> SearchSpace:
    """The space :func:`tune` searches when none is given (see the module docstring).

    ``config`` is the served config (normalized). Knobs that do not apply to the model
    (:func:`~workbench.config_edits.knobs.knob_reasons`: an ensemble's own batcher, a
    sequence model's dynamic batcher) are left out; an ensemble's composing models are
    searched by :func:`workbench.tuning.ensembles.ensemble_space` instead.
    """
    reasons = knob_reasons(config)
    knobs = read_knobs(config)
    axes: dict[str, tuple[object, ...]] = {}
    if "instance_count" not in reasons:
        top = machine.cores if machine.gpus == 0 else 4
        counts = sorted({1, *(c for c in (2, 4, 8) if c <= max(top, 1))} | {knobs.instance_count})
        axes["instance_count"] = tuple(counts)
    if knobs.max_batch_size > 0:
        top = min(max(knobs.max_batch_size, 16), 128)
        sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= top]
        axes["max_batch_size"] = tuple(sorted({*sizes, knobs.max_batch_size}))
        if "dynamic_batching" not in reasons:
            axes["dynamic_batching"] = (True,)
        if "max_queue_delay_us" not in reasons:
            axes["max_queue_delay_us"] = tuple(sorted({0, 500, 2000, knobs.max_queue_delay_us}))
    threads = _thread_values(machine)
    if "intra_op_threads" in KNOB_NAMES and "intra_op_threads" not in reasons and threads:
        current = getattr(knobs, "intra_op_threads", 0)
        axes["intra_op_threads"] = tuple(sorted({current, *threads}))
    return SearchSpace(axes, levels or default_levels(machine), served_values(config, axes))


def _thread_values(machine: Machine) -> list[int]:
    """Intra-op thread counts worth trying: 1 and all the cores (0 keeps the default)."""
    return [1, machine.cores] if machine.cores > 1 else []


__all__ = [
    "KNOB_NAMES",
    "MAX_SETTINGS",
    "SearchSpace",
    "Setting",
    "default_levels",
    "default_space",
    "knob_of",
    "levels_from_text",
    "parse_space",
    "parse_values",
    "served_values",
    "show_value",
    "valid_setting",
]
