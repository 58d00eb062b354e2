"""What the server's statistics methods report, read from the model entries: Triton's
statistics extension (``GET /v2/models[/<m>[/versions/<v>]]/stats``, gRPC
``ModelStatistics``) and the live counters scrapers read."""

from __future__ import annotations

from collections.abc import Mapping

from workbench.common.errors import InvalidArgument
from workbench.common.results import ModelStatisticsReport
from workbench.engine.inference.model import LoadedModel
from workbench.engine.models.registry import ModelEntry
from workbench.messages.types import ModelReadyState
from workbench.stats.statistics import ModelStatistics


def statistics_report(entries: Mapping[str, ModelEntry], name: str = "", version: str = "") -> ModelStatisticsReport:
    """``{"model_stats": [...]}`` for the READY versions of ``name`` (every model's loaded
    versions without a name; only ``version`` when given, "" / "-1" = all).

    Durations are cumulative nanoseconds; ``last_inference`` is ms since the epoch.

    Raises:
        InvalidArgument: unknown model, or a version that is not available (Triton's texts).
    """
    models: list[LoadedModel | None]
    if not name:
        models = [s.model for e in entries.values() for s in e.versions.values() if s.model]
    else:
        entry = entries.get(name)
        if entry is None or not entry.ready_versions():
            raise InvalidArgument(f"requested model '{name}' is not available")
        models = [entry.versions[v].model for v in entry.ready_versions()]
        if version not in ("", "-1"):
            models = [m for m in models if m is not None and m.version_str == version]
            if not models:
                raise InvalidArgument(f"requested model version is not available for model '{name}'")
    return {"model_stats": [m.statistics.snapshot() for m in models if m is not None]}


def live_statistics(entries: Mapping[str, ModelEntry]) -> list[ModelStatistics]:
    """The live statistics objects of every READY version, by model name then version (no
    copy: read them on the event loop, the thread that records them)."""
    return [
        state.model.statistics
        for name in sorted(entries)
        for _, state in sorted(entries[name].versions.items())
        if state.state is ModelReadyState.READY and state.model is not None
    ]


__all__ = ["live_statistics", "statistics_report"]
