"""The Models table: every model and version of the repository index with its state, reason
and memory (Triton's ``memory_usage`` statistics of READY versions)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench import Server


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One row of the Models table.

    Attributes:
        name: model name.
        version: version number as text, "" for a model never loaded (or one whose config is
            being read).
        state: ``READY``, ``LOADING``, ``UNLOADING``, ``UNAVAILABLE``, or "" (never loaded).
        reason: why it is not READY (the load error, "unloaded"), or a failed reload's error
            on a version that kept serving.
        memory_bytes: bytes the version holds per memory kind (``{"CPU": n, "GPU": m}``),
            from the statistics' ``memory_usage``; empty when not READY.
    """

    name: str
    version: str
    state: str
    reason: str
    memory_bytes: dict[str, int]

    @property
    def memory(self) -> str:
        """``memory_bytes`` for people: ``"CPU 1.2 MB, GPU 300 MB"`` ("" when none)."""
        return ", ".join(f"{kind} {format_bytes(size)}" for kind, size in self.memory_bytes.items())


def format_bytes(size: int) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as Triton's docs state memory)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


async def model_rows(server: Server) -> list[ModelRow]:
    """The repository index joined with each READY version's memory usage, by name then
    version (the engine's order)."""
    index = await server.repository_index()
    memory: dict[tuple[str, str], dict[str, int]] = {}
    for stats in (await server.statistics())["model_stats"]:
        totals: dict[str, int] = {}
        for usage in stats.get("memory_usage", []):
            totals[usage["type"]] = totals.get(usage["type"], 0) + int(usage["byte_size"])
        memory[(stats["name"], stats["version"])] = totals
    return [
        ModelRow(row["name"], row.get("version", ""), row.get("state", ""), row.get("reason", ""),
                 memory.get((row["name"], row.get("version", "")), {}))
        for row in index
    ]


__all__ = ["ModelRow", "format_bytes", "model_rows"]
