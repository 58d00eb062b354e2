"""What a measurement does: the load level of one step and the options shared by every step.

Names and defaults follow perf_analyzer's flags (``--measurement-interval`` 5000 ms,
``--percentile``, ``--stability-percentage`` 10, ``--string-length`` 128,
``--request-distribution constant``); the few options perf_analyzer lacks are marked.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from workbench.perf.errors import PerfError

LoadMode = Literal["concurrency", "request_rate"]


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """The load of one measurement step.

    Attributes:
        mode: ``"concurrency"``: a closed loop keeping ``value`` requests in flight (each
            finished request is replaced at once), perf_analyzer's ``--concurrency-range``;
            ``"request_rate"``: an open loop sending ``value`` requests per second whatever
            the responses do, perf_analyzer's ``--request-rate-range``.
        value: in-flight requests (an int >= 1) or requests per second (> 0).
    """

    mode: LoadMode
    value: float

    def __post_init__(self) -> None:
        if self.mode == "concurrency" and (self.value < 1 or self.value != int(self.value)):
            raise PerfError(f"concurrency must be a whole number >= 1, got {self.value}")
        if self.mode == "request_rate" and not self.value > 0:
            raise PerfError(f"request rate must be > 0 requests per second, got {self.value}")

    @classmethod
    def concurrency(cls, requests: int) -> LoadLevel:
        """``requests`` in flight at all times."""
        return cls("concurrency", int(requests))

    @classmethod
    def request_rate(cls, per_second: float) -> LoadLevel:
        """``per_second`` requests sent per second (constant or Poisson spacing)."""
        return cls("request_rate", float(per_second))

    @property
    def label(self) -> str:
        """perf_analyzer's name for the level: ``"Concurrency"`` or ``"Request Rate"`` (the
        first CSV column)."""
        return "Concurrency" if self.mode == "concurrency" else "Request Rate"

    def __str__(self) -> str:
        """``"Concurrency: 4"`` / ``"Request Rate: 250"`` (perf_analyzer's summary prefix)."""
        return f"{self.label}: {format_number(self.value)}"


def format_number(value: float) -> str:
    """A number as C++'s default ``ostream`` prints a double (6 significant digits, no
    trailing zeros): how perf_analyzer writes throughput and request rates (``163.6``,
    ``4032.12``, ``16``)."""
    return format(value, ".6g")


def parse_range(text: str) -> tuple[float, float, float]:
    """perf_analyzer's ``start[:end[:step]]`` range (``--concurrency-range 1:16:2``).

    A missing end means ``start`` only; a missing step is 1.

    Raises:
        PerfError: not one to three numbers, a step <= 0, or an end below the start.
    """
    parts = text.split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise PerfError(f"invalid range '{text}': expected start[:end[:step]]") from None
    if not 1 <= len(numbers) <= 3 or not all(math.isfinite(n) for n in numbers):
        raise PerfError(f"invalid range '{text}': expected start[:end[:step]]")
    start = numbers[0]
    end = numbers[1] if len(numbers) > 1 else start
    step = numbers[2] if len(numbers) > 2 else 1.0
    if step <= 0 or end < start:
        raise PerfError(f"invalid range '{text}': the step must be > 0 and the end >= the start")
    return start, end, step


def levels_from_range(mode: LoadMode, text: str) -> list[LoadLevel]:
    """The levels of a perf_analyzer range, in order: ``("concurrency", "1:4:2")`` -> c=1, 3.

    Raises:
        PerfError: an invalid range or level (:func:`parse_range`, :class:`LoadLevel`).
    """
    start, end, step = parse_range(text)
    count = math.floor((end - start) / step + 1e-9) + 1
    return [LoadLevel(mode, _tidy(mode, start + i * step)) for i in range(count)]


def _tidy(mode: LoadMode, value: float) -> float:
    return round(value) if mode == "concurrency" else round(value, 9)


@dataclass(frozen=True, slots=True)
class PerfOptions:
    """Everything about a measurement except its load levels.

    Attributes:
        model_name, model_version: the model (``""`` = the server's choice, the latest
            ready version, as perf_analyzer's ``-x``).
        batch_size: rows per request (``-b``); > 1 needs a model with ``max_batch_size``.
        input_data: ``"random"`` (perf_analyzer's default), ``"zero"`` or the path of a JSON
            file in perf_analyzer's ``--input-data`` format (:mod:`workbench.perf.input_data`).
        shapes: shapes (without the batch dimension) for inputs with dynamic dims
            (``--shape NAME:d1,d2``).
        string_length: characters of each random BYTES element (``--string-length``).
        string_data: the string every BYTES element carries instead (``--string-data``).
        measurement_interval_ms: length of the measured window, **milliseconds**
            (``-p``/``--measurement-interval``, default 5000).
        warmup_ms: load applied before the window opens and left out of every number,
            **milliseconds** (not a perf_analyzer flag: perf_analyzer discards unstable
            windows instead, see :attr:`stability_percentage`).
        percentile: the latency percentile used for stability and for the summary line
            (``--percentile``); None = the average latency, as perf_analyzer.
        stability_percentage: a step is reported ``stable`` when throughput and the
            stabilizing latency of the window's three thirds stay within this many percent
            of each other (perf_analyzer's rule over its last three windows; here the
            window is measured once and the flag is only reported).
        request_distribution: spacing of request-rate sends: ``"constant"`` or ``"poisson"``.
        max_inflight: requests in flight at most in request-rate mode; a send that finds the
            cap reached waits and counts as delayed (not a perf_analyzer flag).
        latency_threshold_ms: stop a sweep after the first step whose stabilizing latency
            reaches this, **milliseconds** (``-l``/``--latency-threshold``); None = no limit.
        continue_on_error: count failed requests and go on; by default the first failed
            request stops the measurement with :class:`PerfError`, as perf_analyzer aborts.
        server_stats: read the server's statistics before and after each window for the
            queue / compute split (perf_analyzer does when the server has the extension).
        drain_timeout_s: seconds a step waits for its in-flight requests once its window
            closed, before cancelling them.
        seed: seed of the random input data and of Poisson spacing (None = unseeded).
        goodput_latency_us: count the successful requests of each window whose latency is at
            most this many **microseconds** (:attr:`StepResult.within_bound_count`, the
            numerator of goodput); None = not counted. Not a perf_analyzer flag (the tuner's
            goodput objective, :mod:`workbench.tuning`).
    """

    model_name: str
    model_version: str = ""
    batch_size: int = 1
    input_data: str = "random"
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    string_length: int = 128
    string_data: str | None = None
    measurement_interval_ms: int = 5000
    warmup_ms: int = 1000
    percentile: int | None = None
    stability_percentage: float = 10.0
    request_distribution: Literal["constant", "poisson"] = "constant"
    max_inflight: int = 1024
    latency_threshold_ms: float | None = None
    continue_on_error: bool = False
    server_stats: bool = True
    drain_timeout_s: float = 30.0
    seed: int | None = None
    goodput_latency_us: float | None = None

    def __post_init__(self) -> None:
        checks = [
            (bool(self.model_name), "a model name is required"),
            (self.batch_size >= 1, f"batch size must be >= 1, got {self.batch_size}"),
            (self.measurement_interval_ms > 0, "the measurement interval must be > 0 ms"),
            (self.warmup_ms >= 0, "the warm-up must be >= 0 ms"),
            (self.percentile is None or 1 <= self.percentile <= 99,
             f"percentile must be in 1..99, got {self.percentile}"),
            (self.string_length >= 0, "string length must be >= 0"),
            (self.max_inflight >= 1, "max in-flight requests must be >= 1"),
            (self.request_distribution in ("constant", "poisson"),
             f"unknown request distribution '{self.request_distribution}'"),
            (self.input_data in ("random", "zero") or os.path.isfile(self.input_data),
             f"input data '{self.input_data}' is neither 'random', 'zero' nor a file"),
        ]
        for ok, message in checks:
            if not ok:
                raise PerfError(message)
