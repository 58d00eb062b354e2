"""What the Tuning tab's form asks for, parsed: the load levels of a sweep and the candidate
config settings of a comparison.

* Levels: perf_analyzer's range ``start:end[:step]`` (``1:16:2``) or a list of values
  (``1, 2, 4, 8``), in concurrency (requests in flight, whole numbers) or request rate
  (requests per second); at most :data:`MAX_LEVELS`.
* Candidates: one per line, ``knob=value`` pairs separated by spaces, with the names of
  :class:`~workbench.config_edits.knobs.ConfigKnobs` (``max_queue_delay_us=200
  preferred_batch_sizes=4,8 instance_count=2``); blank lines and ``#`` comments are skipped.
  Values are integers (``max_queue_delay_us`` in **microseconds**), ``true`` / ``false`` for
  the switches, comma-separated integers for ``preferred_batch_sizes`` and a Triton kind for
  ``instance_kind``. A candidate sets only the knobs it names; the others keep the served
  config's values.

Nothing here touches the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import cast

from workbench.config_edits.knobs import INSTANCE_KINDS, ConfigKnobs, KnobValues
from workbench.perf import LoadLevel, PerfError, levels_from_range
from workbench.switches import parse_switch

#: the most levels one sweep may have (a sweep of n levels takes n * (warm-up + window))
MAX_LEVELS = 50
#: the knob names a candidate may set
KNOB_NAMES = tuple(f.name for f in fields(ConfigKnobs))


def parse_levels(mode: str, text: str) -> list[LoadLevel]:
    """The load levels of ``text`` in ``mode`` (``"concurrency"`` or ``"request_rate"``), in
    the order written.

    Raises:
        PerfError: no level, a malformed range or value, a level the mode refuses
            (concurrency not a whole number >= 1, a rate <= 0), or more than
            :data:`MAX_LEVELS` levels.
    """
    if mode not in ("concurrency", "request_rate"):
        raise PerfError(f"the load mode must be concurrency or request_rate, got '{mode}'")
    text = text.strip()
    if not text:
        raise PerfError("name at least one load level")
    if ":" in text:
        levels = levels_from_range(mode, text)  # type: ignore[arg-type]
    else:
        levels = [_level(mode, word) for word in re.split(r"[,\s]+", text) if word]
    if len(levels) > MAX_LEVELS:
        raise PerfError(f"{len(levels)} load levels: at most {MAX_LEVELS} per sweep")
    return levels


def _level(mode: str, word: str) -> LoadLevel:
    try:
        value = float(word)
    except ValueError:
        raise PerfError(f"'{word}' is not a number (levels: start:end[:step] or 1, 2, 4)") from None
    if mode == "concurrency" and value.is_integer():
        return LoadLevel.concurrency(int(value))
    return LoadLevel(mode, value)  # type: ignore[arg-type]  # refuses what the mode refuses


@dataclass(frozen=True)
class Candidate:
    """One config setting to compare.

    Attributes:
        label: how the plot, the table and the summary name it (the knobs as written,
            normalized: ``max_queue_delay_us=200 instance_count=2``).
        values: knob name (:data:`KNOB_NAMES`) -> value, for ``dataclasses.replace`` on the
            served config's :class:`ConfigKnobs`.
    """

    label: str
    values: KnobValues


def parse_candidates(text: str) -> list[Candidate]:
    """The candidates of ``text``, one per non-blank, non-comment line.

    Raises:
        ValueError: a pair without ``=``, an unknown knob, a value of the wrong kind, a knob
            named twice on a line, or two lines with the same setting.
    """
    candidates: list[Candidate] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        values: dict[str, object] = {}
        for pair in line.split():
            name, sep, raw = pair.partition("=")
            if not sep or not raw:
                raise ValueError(f"candidate line {number}: '{pair}' is not knob=value")
            if name not in KNOB_NAMES:
                raise ValueError(f"candidate line {number}: unknown knob '{name}' "
                                 f"(one of {', '.join(KNOB_NAMES)})")
            if name in values:
                raise ValueError(f"candidate line {number}: '{name}' is set twice")
            values[name] = _value(name, raw, number)
        label = " ".join(f"{k}={_show(v)}" for k, v in values.items())
        if any(c.label == label for c in candidates):
            raise ValueError(f"candidate line {number}: '{label}' is listed twice")
        # each value checked against its knob by _value
        candidates.append(Candidate(label, cast(KnobValues, values)))
    return candidates


def _value(name: str, raw: str, number: int) -> object:
    where = f"candidate line {number}: {name}"
    if name in ("dynamic_batching", "response_cache"):
        switch = parse_switch(raw)
        if switch is None:
            raise ValueError(f"{where} must be true or false, got '{raw}'")
        return switch
    if name == "instance_kind":
        if raw not in INSTANCE_KINDS:
            raise ValueError(f"{where} must be one of {', '.join(INSTANCE_KINDS)}, got '{raw}'")
        return raw
    try:
        numbers = tuple(int(v) for v in raw.split(",") if v)
    except ValueError:
        raise ValueError(f"{where}: '{raw}' is not an integer") from None
    if name == "preferred_batch_sizes":
        if not numbers or min(numbers) < 1:
            raise ValueError(f"{where} must be integers >= 1, got '{raw}'")
        return numbers
    if len(numbers) != 1:
        raise ValueError(f"{where}: '{raw}' is not one integer")
    least = 1 if name == "instance_count" else 0
    if numbers[0] < least:
        raise ValueError(f"{where} must be >= {least}, got {numbers[0]}")
    return numbers[0]


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["KNOB_NAMES", "MAX_LEVELS", "Candidate", "parse_candidates", "parse_levels"]
