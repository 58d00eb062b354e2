"""Where a tuning run measures: the engine in this process, or a v2 server by URL.

A target loads a setting as a *temporary* load - Triton's load API with a ``config``
override (:func:`workbench.config_edits.overrides.override_config`): the new config loads
beside the serving one and traffic switches without a failed request; ``config.pbtxt`` is
never written - and at the end reloads the model from its file (:meth:`Target.restore`).
It reads the serving process's CPU time and resident memory where it can (the in-process
engine: this process; a server on this machine: by its pid), for the CPU time per
inference and the memory per instance beside each result.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import Server
from workbench.config_edits.knobs import ConfigKnobs, apply_knobs, read_knobs
from workbench.config_edits.overrides import override_config
from workbench.gpu.memory import read_gpu_memory
from workbench.perf import InProcessClient, PerfClient, remote_client
from workbench.tuning.machine import process_cpu_seconds, process_rss_mb


class Target(Protocol):
    """What the tuner needs from a server."""

    #: how results name where they were measured ("in-process engine", "grpc://host:8001")
    label: str
    client: PerfClient

    async def served_config(self, name: str) -> ModelConfig:
        """The config ``name`` serves with now (normalized)."""

    async def load(self, name: str, base: ModelConfig, knobs: Mapping[str, object]) -> None:
        """Load ``name`` with ``base`` changed by ``knobs`` (a temporary load)."""

    async def restore(self, name: str, base: ModelConfig) -> None:
        """Load ``name`` again with ``base``, the config it served with before the run: a
        load without ``config`` would keep the last candidate's override while the model's
        files are unchanged (Triton's repository manager; :mod:`workbench.engine.manager.repository_manager`)."""

    def cpu_seconds(self) -> float | None:
        """CPU seconds the serving process has used (None where it cannot be read)."""

    async def memory_mb(self) -> float | None:
        """Resident memory of the serving process after a collection, **MiB** (None where
        it cannot be read)."""

    async def gpu_memory_mb(self) -> float | None:
        """GPU memory the serving process uses on all devices, **MiB** (None without a GPU
        or where it cannot be read)."""

    async def close(self) -> None:
        """Release the target's clients (the server keeps running)."""


def completed_knobs(base: ModelConfig, knobs: Mapping[str, object]) -> dict[str, object]:
    """``knobs`` plus what they imply for ``base``: a ``max_batch_size`` below some of the
    served preferred batch sizes drops those sizes (Triton refuses a preferred size above
    the limit), unless the knobs set the preferred sizes themselves."""
    out = dict(knobs)
    limit = out.get("max_batch_size")
    if isinstance(limit, int) and "preferred_batch_sizes" not in out:
        served = read_knobs(base).preferred_batch_sizes
        kept = tuple(s for s in served if s <= limit)
        if kept != served:
            out["preferred_batch_sizes"] = kept
    return out


def changed_knobs(base: ModelConfig, knobs: Mapping[str, object]) -> ConfigKnobs:
    """``base``'s knobs with ``knobs`` (:func:`completed_knobs`) set."""
    return replace(read_knobs(base), **completed_knobs(base, knobs))  # type: ignore[arg-type]


def changed_message(base: ModelConfig, knobs: Mapping[str, object]) -> ModelConfig:
    """``base`` with ``knobs`` applied (the tuned config as a message, e.g. for its text).

    Raises:
        ValueError: a knob that does not apply to the model, or a value it refuses.
    """
    return apply_knobs(base, changed_knobs(base, knobs))


def changed_config(base: ModelConfig, knobs: Mapping[str, object]) -> dict:
    """The config JSON a load with ``knobs`` applied to ``base`` sends.

    Raises:
        ValueError: as :func:`changed_message`.
    """
    return override_config(base, knobs=changed_knobs(base, knobs))


class EngineTarget:
    """A :class:`workbench.Server` in this process (the load generator shares its loop)."""

    label = "in-process engine"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.client: PerfClient = InProcessClient(server)

    async def served_config(self, name: str) -> ModelConfig:
        config = ModelConfig()
        config.CopyFrom(await self.server.model_config(name))
        return config

    async def load(self, name: str, base: ModelConfig, knobs: Mapping[str, object]) -> None:
        await self.server.load_model(name, config=changed_config(base, knobs))

    async def restore(self, name: str, base: ModelConfig) -> None:
        await self.load(name, base, {})

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds()

    async def memory_mb(self) -> float | None:
        gc.collect()
        return process_rss_mb()

    async def gpu_memory_mb(self) -> float | None:
        readings = await asyncio.to_thread(read_gpu_memory)
        return sum(r.byte_size for r in readings.values()) / 2**20 if readings else None

    async def close(self) -> None:
        return None


class RemoteTarget:
    """A v2 server (this product, or Triton) at ``url`` over ``protocol``; measured over the
    network and labelled so. Loads need the server in explicit model control mode.

    Args:
        pid: the server's process id when it runs on this machine (CPU time and resident
            memory are read from ``/proc``); None: not measured.
        headers: sent with the loads (a restricted ``model-repository`` API's key); kept in
            memory only.
    """

    def __init__(self, url: str, protocol: str = "grpc", pid: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url, self.protocol, self.pid = url, protocol, pid
        self.headers = dict(headers or {}) or None
        self.label = f"{protocol}://{url} (over the network)"
        self.client: PerfClient = remote_client(url, protocol)  # type: ignore[arg-type]
        self._control: Any = None

    def _repository_client(self) -> Any:
        if self._control is None:
            if self.protocol == "grpc":
                import tritonclient.grpc.aio as aio
            else:
                import tritonclient.http.aio as aio
            self._control = aio.InferenceServerClient(self.url)
        return self._control

    async def served_config(self, name: str) -> ModelConfig:
        data = await self.client.model_config(name, "")
        data = data.get("config", data)
        return json_format.ParseDict(data, ModelConfig(), ignore_unknown_fields=True)

    async def load(self, name: str, base: ModelConfig, knobs: Mapping[str, object]) -> None:
        await self._repository_client().load_model(name, headers=self.headers,
                                                   config=json.dumps(changed_config(base, knobs)))

    async def restore(self, name: str, base: ModelConfig) -> None:
        await self.load(name, base, {})

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.pid) if self.pid else None

    async def memory_mb(self) -> float | None:
        if not self.pid:
            return None
        await asyncio.sleep(0)  # the remote server collects on its own
        return process_rss_mb(self.pid)

    async def gpu_memory_mb(self) -> float | None:
        return None  # another process's GPU memory: read on the server's side (its metrics)

    async def close(self) -> None:
        await self.client.close()
        if self._control is not None:
            await self._control.close()


__all__ = ["EngineTarget", "RemoteTarget", "Target", "changed_config", "changed_knobs", "changed_message",
           "completed_knobs"]
