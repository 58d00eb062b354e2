"""The dashboard attached to a v2 server it did not start: a headless ``workbench serve``,
several replicas of one, or a real ``tritonserver``.

* :class:`~workbench.remote.client.RemoteServer`: the subset of :class:`workbench.Server`
  the dashboard's tabs use (repository index, model metadata and config, statistics,
  load / unload with a ``config`` override, health), over KServe v2 HTTP with Triton's
  extensions, on one or several replicas (``httpx``).
* :class:`~workbench.remote.config_files.RemoteConfigFiles`: the Config tab's file service
  over the load API's ``config`` override (read-only, saying why, where the server refuses).
* :class:`~workbench.remote.live.RemoteLiveStatistics`: the Live tab's per-interval samples
  (:class:`workbench.serving.live_stats.LiveSample`) from statistics-API deltas and ``/metrics``.

An adapter like the UI: it reads the public API only (``workbench``) and the shared leaves.
"""

from __future__ import annotations

from typing import TypeAlias

from workbench import Server
from workbench.remote.client import RemoteServer
from workbench.remote.live import RemoteLiveStatistics

#: what the dashboard's tabs act on: the engine in this process, or a server attached by URL
AnyServer: TypeAlias = Server | RemoteServer

__all__ = ["AnyServer", "RemoteLiveStatistics", "RemoteServer"]
