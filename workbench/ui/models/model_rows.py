"""The Models table's rows: every model and version of the repository index with its state
and reason (Triton's repository index), what its served config says (backend, instance
groups, ``max_batch_size``, batching), its live traffic (requests/s, p99, failures of the
last statistics interval) and its memory.

Memory (the statistics' ``memory_usage``, Triton's ``MemoryUsage`` per device): a figure the
backend reports (PyTorch's parameters and buffers, a Python model's stub process) is shown
as it is; one the loader measured (the server's resident-set growth while the instances
loaded, one load at a time) is an estimate, shown with ``≈``; a measurement that saw no
growth (the allocator reused memory an earlier version freed) is "not measured", never
``0 B``. :data:`MEMORY_NOTES` words each case for the cell's tooltip.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

from workbench import ModelNotFound, ModelNotReady
from workbench.remote import AnyServer, RemoteServer
from workbench.serving.live_stats import LiveSample

#: tooltips of the memory cell, by how the figure was obtained
MEMORY_NOTES = {
    "estimate": ("≈ estimate: how much the server's resident memory grew while the instances "
                 "loaded, measured one load at a time. Memory the allocator reused is not seen "
                 "and other activity blurs it."),
    "reported": ("reported by the backend: the framework's own figure (PyTorch's parameters "
                 "and buffers) or the model's own process (a Python model's stub)"),
    "unmeasured": ("not measured: the server's resident memory did not grow while the instances "
                   "loaded (the allocator reused memory freed earlier)"),
}


@dataclass(frozen=True, slots=True)
class MemoryFigure:
    """What one model version holds on one kind of memory.

    Attributes:
        kind: ``CPU``, ``CPU_PINNED`` or ``GPU`` (with the device id for a GPU: ``GPU 0``).
        byte_size: bytes.
        estimate: measured by the loader (True) or reported by the backend (False).
    """

    kind: str
    byte_size: int
    estimate: bool

    @property
    def text(self) -> str:
        """``"CPU ≈ 7.2 MB"``, ``"GPU 0 300.0 MB"``, ``"CPU not measured"`` (never ``0 B``)."""
        if self.estimate and self.byte_size == 0:
            return f"{self.kind} not measured"
        return f"{self.kind} {'≈ ' if self.estimate else ''}{format_bytes(self.byte_size)}"

    @property
    def note(self) -> str:
        """The tooltip: how the figure was obtained (:data:`MEMORY_NOTES`)."""
        if not self.estimate:
            return MEMORY_NOTES["reported"]
        return MEMORY_NOTES["unmeasured" if self.byte_size == 0 else "estimate"]


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
        backend: the served config's ``backend`` (or ``platform``); "" when not READY.
        instances: the instance groups, ``"2 × CPU"``, ``"1 × GPU 0"``; "" when not READY
            or none (an ensemble).
        max_batch_size: the served ``max_batch_size``; None when not READY.
        batching: ``dynamic``, ``sequence``, ``ensemble`` or ``none``; "" when not READY.
        requests_per_s: successful requests per second in the last statistics interval
            (None: not READY, or no interval measured yet).
        p99_ms: p99 request latency in the server in that interval, **milliseconds** (None
            without a successful request then).
        failures: failed requests in that interval (None as ``requests_per_s``).
        memory: what the version holds, per kind of memory (empty when not READY).
    """

    name: str
    version: str
    state: str
    reason: str
    backend: str = ""
    instances: str = ""
    max_batch_size: int | None = None
    batching: str = ""
    requests_per_s: float | None = None
    p99_ms: float | None = None
    failures: int | None = None
    memory: tuple[MemoryFigure, ...] = field(default_factory=tuple)

    @property
    def memory_bytes(self) -> int:
        """All bytes of :attr:`memory` (what the table sorts by)."""
        return sum(figure.byte_size for figure in self.memory)

    @property
    def memory_text(self) -> str:
        """``"CPU ≈ 1.2 MB, GPU 0 300.0 MB"`` ("" when none)."""
        return ", ".join(figure.text for figure in self.memory)

    @property
    def memory_note(self) -> str:
        """The memory cell's tooltip: how each figure was obtained."""
        return "; ".join(dict.fromkeys(f"{f.kind}: {f.note}" for f in self.memory))


def format_bytes(size: int) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as Triton's docs state memory)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _config_columns(config) -> dict:
    """The served config's columns of a row (a ``ModelConfig`` message)."""
    groups = []
    for group in config.instance_group:
        kind = type(group).Kind.Name(group.kind).removeprefix("KIND_")
        where = f" {','.join(str(g) for g in group.gpus)}" if kind == "GPU" and group.gpus else ""
        groups.append(f"{group.count} × {kind}{where}")
    choice = config.WhichOneof("scheduling_choice") or ""
    batching = {"dynamic_batching": "dynamic", "sequence_batching": "sequence",
                "ensemble_scheduling": "ensemble"}.get(choice, "none")
    return {"backend": config.backend or config.platform, "instances": ", ".join(groups),
            "max_batch_size": config.max_batch_size, "batching": batching}


def _memory(stats) -> tuple[MemoryFigure, ...]:
    figures: dict[str, tuple[int, bool]] = {}
    for usage in stats.memory_usage:
        kind = f"GPU {usage.id}" if usage.kind == "GPU" else usage.kind
        size, estimate = figures.get(kind, (0, False))
        figures[kind] = (size + usage.byte_size, estimate or getattr(usage, "estimate", False))
    return tuple(MemoryFigure(kind, size, estimate) for kind, (size, estimate) in figures.items())


def _live_columns(sample: LiveSample | None) -> dict:
    if sample is None:
        return {}
    p99 = None if sample.p99_us is None or math.isnan(sample.p99_us) else sample.p99_us / 1000
    return {"requests_per_s": sample.requests_per_s, "p99_ms": p99, "failures": sample.failures}


async def model_rows(server: AnyServer,
                     live: dict[tuple[str, str], LiveSample] | None = None) -> list[ModelRow]:
    """The repository index joined, for each READY version, with its served config, its
    memory usage and its latest live sample (``live``: by ``(name, version)``), by name then
    version (the engine's order). A model an attached server lists with neither state nor
    reason (Triton's row of a model never loaded there) says "not loaded on <server>"."""
    index = await server.repository_index()
    stats = {(s.name, s.version): s for s in server.model_statistics()}
    rows = []
    for entry in index:
        name, version = entry["name"], entry.get("version", "")
        extra: dict = {}
        if entry.get("state") == "READY" and (name, version) in stats:
            # unloaded meanwhile: the row shows what is known
            with contextlib.suppress(ModelNotFound, ModelNotReady):
                extra.update(_config_columns(await server.model_config(name, version)))
            extra["memory"] = _memory(stats[(name, version)])
            extra.update(_live_columns((live or {}).get((name, version))))
        state, reason = entry.get("state", ""), entry.get("reason", "")
        if not state and not reason and isinstance(server, RemoteServer):
            reason = f"not loaded on {server.label}"  # Triton's index row of a model never loaded
        rows.append(ModelRow(name, version, state, reason, **extra))
    return rows


__all__ = ["MEMORY_NOTES", "MemoryFigure", "ModelRow", "format_bytes", "model_rows"]
