"""The resume file of a tuning run: every point as it is measured, so an interrupted run
(Stop, Ctrl-C, a crash) continues where it stopped.

A JSON document ``{"version": 1, "model": ..., "space": ..., "goals": ..., "points": [...]}``
rewritten atomically (a temporary file renamed over it) after each point. On resume, a
point of the same model, setting and load level is taken from the file instead of measured
again (and marked ``from_resume``); a file of another model is refused, one of another space
or goals is used for the points it has in common.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from workbench.perf import LoadLevel, ServerStats, StepResult
from workbench.perf.server_stats import DURATION_KEYS
from workbench.tuning.points import Point
from workbench.tuning.space import Setting

VERSION = 1


def step_from_dict(data: dict) -> StepResult:
    """A :class:`~workbench.perf.StepResult` from its ``as_dict()`` (server durations come
    back as the per-request means it kept, whole **µs**)."""
    server = data.get("server")
    return StepResult(
        level=LoadLevel(data["mode"], data["value"]), batch_size=data["batch_size"],
        window_s=data["window_s"], request_count=data["request_count"],
        error_count=data["error_count"], delayed_count=data["delayed_count"],
        sent_count=data["sent_count"], throughput_infer_per_s=data["throughput_infer_per_s"],
        send_rate_per_s=data["send_rate_per_s"], latency_avg_us=data["latency_avg_us"],
        latency_std_us=data["latency_std_us"], latency_min_us=data["latency_min_us"],
        latency_max_us=data["latency_max_us"],
        percentiles_us={int(k): v for k, v in data["percentiles_us"].items()},
        stabilizing_latency_us=data["stabilizing_latency_us"], percentile=data["percentile"],
        client_send_us=data["client_send_us"], client_recv_us=data["client_recv_us"],
        response_wait_us=data["response_wait_us"], network_us=data.get("network_us", 0),
        server=None if server is None else ServerStats(
            version=server["version"], inference_count=server["inference_count"],
            execution_count=server["execution_count"],
            durations={k: (server[f"{k}_count"], server[f"{k}_us"] * server[f"{k}_count"] * 1000)
                       for k in DURATION_KEYS if f"{k}_count" in server},
            response_cache=server.get("response_cache", False)),
        stable=data["stable"], errors=tuple(data.get("errors", ())),
        within_bound_count=data.get("within_bound_count"))


def point_from_dict(data: dict) -> Point:
    """A :class:`Point` saved by :meth:`Point.as_dict`, marked ``from_resume``."""
    windows = tuple(step_from_dict(w) for w in data["window_results"])
    level = LoadLevel(data["level"]["mode"], data["level"]["value"])
    return Point(Setting.from_dict(data["setting"]), level, windows, data["stable"],
                 data["throughput_spread_pct"], data["latency_spread_pct"],
                 data.get("cpu_s_per_inference"), from_resume=True, steps=data.get("steps", {}),
                 probe=data.get("probe_kops"))


def point_key(setting: Setting, level: LoadLevel) -> str:
    return f"{setting.label} @ {level.mode} {level.value:g}"


def load_points(path: str | os.PathLike, model: str) -> dict[str, Point]:
    """The saved points of ``path`` by :func:`point_key` (empty when the file does not exist).

    Raises:
        ValueError: the file is not a resume file, or one of another model.
    """
    file = Path(path)
    if not file.exists():
        return {}
    try:
        data = json.loads(file.read_text())
        if data.get("version") != VERSION or "points" not in data:
            raise ValueError("not a workbench tune resume file")
        if data.get("model") != model:
            raise ValueError(f"it resumes a run of model '{data.get('model')}', not '{model}'")
        points = [point_from_dict(p) for p in data["points"]]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{file}: not a readable resume file ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from None
    return {point_key(p.setting, p.level): p for p in points}


def save_points(path: str | os.PathLike, model: str, header: dict, points: list[dict]) -> None:
    """Write the resume file atomically (``header``: the space and goals, for the reader)."""
    file = Path(path)
    document = {"version": VERSION, "model": model, **header, "points": points}
    fd, temporary = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f)
        os.replace(temporary, file)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["load_points", "point_from_dict", "point_key", "save_points", "step_from_dict"]
