"""Hot-reload churn for tests and benchmarks: rewrite a model's config or file between
reloads while clients keep sending requests, and count what came back.

Files are replaced atomically (written to a hidden temporary name beside, then renamed), as
a deployment tool should: a poll never sees half a file. The model computes the same
function before and after every change, so every response can be checked exactly.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph


def atomic_write(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` in one rename (readers see the old or the new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.tmp"
    temporary.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(temporary, path)


def add_sub_config(name: str, max_batch_size: int, instances: int) -> str:
    """The add_sub test model's config (``ADD_SUB_CONFIG``) under ``name``, with dynamic
    batching, ``max_batch_size`` and ``instances`` CPU instances."""
    config = ADD_SUB_CONFIG.replace('"add_sub"', f'"{name}"')
    config = config.replace("max_batch_size: 8", f"max_batch_size: {max_batch_size}")
    config = config.replace("count: 2 kind: KIND_CPU", f"count: {instances} kind: KIND_CPU")
    return config + "dynamic_batching { }\n"


def add_sub_model_bytes(generation: int) -> bytes:
    """add_sub as ONNX bytes that differ per ``generation`` (the graph's doc string) while
    the function stays OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    graph = add_sub_graph()
    graph.doc_string = f"generation {generation}"
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def write_add_sub(repo: Path, name: str = "add_sub", max_batch_size: int = 8, instances: int = 2) -> Path:
    """``repo/name`` holding add_sub version 1 (config + model file)."""
    folder = repo / name
    atomic_write(folder / "config.pbtxt", add_sub_config(name, max_batch_size, instances))
    atomic_write(folder / "1" / "model.onnx", add_sub_model_bytes(0))
    return folder


def churn(folder: Path, step: int) -> str:
    """Change the add_sub model in ``folder`` for reload number ``step`` (1, 2, ...):
    odd steps rewrite ``config.pbtxt`` (max_batch_size 16 / 8 and 1 / 2 instances,
    alternating), even steps rewrite version 1's ``model.onnx`` (same function, new bytes).
    Returns what changed, for messages."""
    if step % 2:
        big = (step // 2) % 2 == 0
        max_batch_size, instances = (16, 1) if big else (8, 2)
        atomic_write(folder / "config.pbtxt", add_sub_config(folder.name, max_batch_size, instances))
        return f"config max_batch_size={max_batch_size} instances={instances}"
    atomic_write(folder / "1" / "model.onnx", add_sub_model_bytes(step))
    return "model file"


@dataclass
class Tally:
    """Outcome of :func:`run_clients`: successful requests, failed ones (with the first
    few errors) and per-request latencies in seconds."""

    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)

    def add_failure(self, error: BaseException | str) -> None:
        self.failed += 1
        if len(self.errors) < 5:
            self.errors.append(error if isinstance(error, str) else f"{type(error).__name__}: {error}")


async def run_clients(
    send: Callable[[int], Awaitable[None]], clients: int, stop: asyncio.Event,
    tally: Tally | None = None,
) -> Tally:
    """``clients`` concurrent loops, each awaiting ``send(i)`` (i = a running request
    number) back to back until ``stop`` is set. ``send`` raises (AssertionError included)
    for a failed or wrong response; that counts as a failure, and the loop goes on.
    Counts go to ``tally`` (a new one if None), readable while the clients run."""
    tally = tally if tally is not None else Tally()
    counter = iter(range(1 << 62))

    async def client() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                await send(next(counter))
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the run
                tally.add_failure(exc)
                await asyncio.sleep(0)  # a request that fails at once must not starve the loop
                continue
            tally.latencies_s.append(time.perf_counter() - start)
            tally.ok += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return tally


__all__ = [
    "Tally", "add_sub_config", "add_sub_model_bytes", "atomic_write", "churn", "run_clients",
    "write_add_sub",
]
