"""What the server says happened during a measurement window: statistics deltas.

perf_analyzer reads the statistics extension before and after each window and reports
per-request averages of the difference: queue, compute input / infer / output, cache hit /
miss. This module does the same on Triton's JSON (``{"model_stats": [...]}``, cumulative
nanoseconds; gRPC's JSON writes 64-bit counters as strings and leaves zero fields out, both
handled here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: the ``inference_stats`` durations perf_analyzer reads
DURATION_KEYS = ("success", "queue", "compute_input", "compute_infer", "compute_output",
                 "cache_hit", "cache_miss")


@dataclass(frozen=True, slots=True)
class ServerStats:
    """The server's counters for one model version over one window.

    Attributes:
        version: the version measured (perf_analyzer's rule when none was asked for: the
            highest version whose request count grew).
        inference_count: inferences executed (batch-weighted), Triton's ``inference_count``.
        execution_count: model executions (batches), Triton's ``execution_count``.
        durations: ``inference_stats`` key (:data:`DURATION_KEYS`) -> (count, total **ns**).
        response_cache: the model's config enables the response cache.
    """

    version: str
    inference_count: int
    execution_count: int
    durations: Mapping[str, tuple[int, int]]
    response_cache: bool = False

    def count(self, key: str) -> int:
        """Requests counted under ``key`` (e.g. ``"success"``, ``"queue"``)."""
        return self.durations.get(key, (0, 0))[0]

    def avg_ns(self, key: str) -> int:
        """Mean duration per request under ``key``, **ns** (0 without requests)."""
        count, ns = self.durations.get(key, (0, 0))
        return ns // count if count else 0

    def avg_us(self, key: str) -> int:
        """Mean duration per request under ``key``, whole **µs**, truncated as
        perf_analyzer's ``AverageDurationInUs`` (``ns / (count * 1000)``)."""
        count, ns = self.durations.get(key, (0, 0))
        return ns // (count * 1000) if count else 0

    @property
    def compute_ns(self) -> int:
        """Mean compute time (input + infer + output) per request, **ns**."""
        count = self.count("compute_input")
        total = sum(self.durations.get(k, (0, 0))[1]
                    for k in ("compute_input", "compute_infer", "compute_output"))
        return total // count if count else 0

    def as_dict(self) -> dict:
        """JSON-ready: counts and per-request means in **µs**."""
        data: dict = {"version": self.version, "inference_count": self.inference_count,
                      "execution_count": self.execution_count}
        for key in DURATION_KEYS:
            data[f"{key}_count"] = self.count(key)
            data[f"{key}_us"] = self.avg_us(key)
        return data


def stats_delta(before: dict, after: dict, model: str, version: str,
                response_cache: bool = False) -> ServerStats | None:
    """The counters of ``model`` that grew between two statistics snapshots.

    Args:
        before, after: ``{"model_stats": [...]}`` from the statistics extension.
        version: the version asked for; ``""`` picks the highest version whose success
            count grew (perf_analyzer's ``DetermineStatsModelVersion``).

    Returns:
        None when no version of ``model`` served a request in between.
    """
    start = _by_version(before, model)
    end = _by_version(after, model)
    if version:
        grown = [version] if version in end else []
    else:
        grown = [v for v, e in end.items()
                 if _pair(e, "success")[0] > _pair(start.get(v, {}), "success")[0]]
    if not grown:
        return None
    chosen = max(grown, key=int)
    first, last = start.get(chosen, {}), end[chosen]
    durations = {}
    for key in DURATION_KEYS:
        (c0, n0), (c1, n1) = _pair(first, key), _pair(last, key)
        durations[key] = (c1 - c0, n1 - n0)
    return ServerStats(
        version=chosen,
        inference_count=_int(last.get("inference_count")) - _int(first.get("inference_count")),
        execution_count=_int(last.get("execution_count")) - _int(first.get("execution_count")),
        durations=durations,
        response_cache=response_cache,
    )


def _by_version(snapshot: dict, model: str) -> dict[str, dict]:
    return {str(entry.get("version", "")): entry for entry in snapshot.get("model_stats", [])
            if entry.get("name") == model}


def _pair(entry: dict, key: str) -> tuple[int, int]:
    stat = entry.get("inference_stats", {}).get(key, {})
    return _int(stat.get("count")), _int(stat.get("ns"))


def _int(value: object) -> int:
    return int(value or 0)  # type: ignore[call-overload]
