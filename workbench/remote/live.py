"""Live statistics of an attached server: the samples :mod:`workbench.serving.live_stats` produces for
the engine in this process (:class:`~workbench.serving.live_stats.LiveSample`, one per READY version
per interval), from what a remote v2 server publishes.

Each :meth:`RemoteLiveStatistics.sample` (the dashboard's one-second beat) closes the interval
between the last two reads of ``GET /v2/models/stats`` (summed over replicas) and starts the
next read in the background, so the beat never waits on the network. From the counter
deltas: requests and inferences per second, failures, mean queue and compute time, the
executions by batch size. Two figures Triton's statistics API does not have:

* latency percentiles (p50 / p95 / p99): from ``/metrics``'s ``nv_inference_request_summary_us``
  quantiles where the server exports them (``--metrics-config summary_latencies=true``, with
  ``summary_quantiles`` including 0.5, 0.95, 0.99; a recent window rather than the interval,
  the highest over replicas); None (no latency line) otherwise;
* pending requests: ``nv_inference_pending_request_count`` from ``/metrics``, 0 when no
  metrics URL is given.

Several replicas: ``history`` holds their sum (what the Live tab's plots show); each
replica's own samples are kept too (``replicas``: the Live tab overlays one line per replica),
from the same read (one ``GET /v2/models/stats`` per replica per beat).

Nothing is measured in this process: no observer, no cost on the server's serving path
beyond the two GETs per second.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from workbench.remote.client import RemoteServer, RemoteVersionStats
from workbench.serving.live_stats import LiveSample, LiveStatistics


class RemoteLiveStatistics(LiveStatistics):
    """Per-interval samples of every version an attached server reports (a
    :class:`LiveStatistics` to its readers: ``history``, :meth:`sample`, :meth:`close`).

    Args:
        server: the attached server.
        history: samples kept per model version.
        start: runs the background read (a coroutine) on the dashboard's loop (the store's
            ``spawn``); default: a task on the running loop.
    """

    def __init__(self, server: RemoteServer, history: int = 600,
                 start: Callable[[Coroutine[Any, Any, Any]], Any] | None = None) -> None:
        # the engine's observer and counters are not used: nothing of LiveStatistics.__init__
        self.remote = server
        self.history: dict[tuple[str, str], deque[LiveSample]] = {}
        #: with several replicas, each one's samples: replica URL -> (model, version) -> samples
        #: ({} with one server: ``history`` is its own)
        self.replicas: dict[str, dict[tuple[str, str], deque[LiveSample]]] = {}
        self._history_length = history
        self._closed = False
        self._start = start or (lambda coroutine: asyncio.get_running_loop().create_task(coroutine))
        #: the counters of the last read and when it was made (monotonic seconds)
        self._read: tuple[float, dict[tuple[str, str], RemoteVersionStats]] | None = None
        self._sampled: tuple[float, dict[tuple[str, str], RemoteVersionStats]] | None = None
        #: each replica's last good read, and the one its last samples closed with
        self._replica_read: dict[str, tuple[float, dict[tuple[str, str], RemoteVersionStats]]] = {}
        self._replica_sampled: dict[str, tuple[float, dict[tuple[str, str], RemoteVersionStats]]] = {}
        self._reading: Any = None
        #: the last read's error ("" after a good one); the page says it through the Models
        #: tab's error pane and the attach bar's health line, which read the same server
        self.error = ""
        self._last_samples: list[LiveSample] = []
        self._read_later()

    async def read(self) -> None:
        """Read the server's counters now (what the next :meth:`sample` closes with)."""
        try:
            replicas = await self.remote.replica_statistics()
            several = len(replicas) > 1  # several URLs, or a cluster's ingress: its replicas
            stats = self.remote.summed(replicas, quiet=several)
        except Exception as exc:  # noqa: BLE001 - unreachable, refused: said on the page
            self.error = str(exc) or type(exc).__name__
            return
        self.error = ""
        now = time.monotonic()
        self._read = (now, {(s.name, s.version): s for s in stats})
        if several:
            for url, read in replicas.items():
                if not isinstance(read, BaseException):
                    self._replica_read[url] = (now, {(s.name, s.version): s for s in read})

    def _read_later(self) -> None:
        if self._closed or (self._reading is not None and not self._reading.done()):
            return
        self._reading = self._start(self.read())

    def sample(self) -> list[LiveSample]:
        """Close the interval between the previous sample's read and the latest read (one
        sample per version the server reports, by name then version), and start the next
        read. No newer read yet (a slow server): the last samples again, not kept twice."""
        read = self._read
        self._read_later()
        if read is None:
            return []
        if self._sampled is not None and read[0] == self._sampled[0]:
            return list(self._last_samples)
        before = self._sampled
        self._sampled = read
        wall = time.time()
        self._sample_replicas(wall)
        if before is None:  # the first read starts the first interval
            return []
        interval = max(read[0] - before[0], 1e-6)
        samples = [_sample(wall, interval, stats, before[1].get(key))
                   for key, stats in read[1].items()]
        for sample in samples:
            key = (sample.model, sample.version)
            if key not in self.history:
                self.history[key] = deque(maxlen=self._history_length)
            self.history[key].append(sample)
        self._last_samples = samples
        return samples

    def _sample_replicas(self, wall: float) -> None:
        """Each replica's interval since its previous sampled read (a replica that did not
        answer this beat adds nothing: its next good read closes a longer interval)."""
        for url, read in self._replica_read.items():
            before = self._replica_sampled.get(url)
            if before is not None and before[0] == read[0]:
                continue
            self._replica_sampled[url] = read
            if before is None:
                continue
            interval = max(read[0] - before[0], 1e-6)
            kept = self.replicas.setdefault(url, {})
            for key, stats in read[1].items():
                if key not in kept:
                    kept[key] = deque(maxlen=self._history_length)
                kept[key].append(_sample(wall, interval, stats, before[1].get(key)))

    def close(self) -> None:
        """Stop reading (idempotent); the server keeps its counters."""
        self._closed = True


def _sample(wall: float, interval: float, now: RemoteVersionStats,
            before: RemoteVersionStats | None) -> LiveSample:
    if before is None or now.success_count < before.success_count or now.fail_count < before.fail_count:
        before = RemoteVersionStats(now.name, now.version)  # new, or counters reset (reloaded)
    requests = now.success_count - before.success_count
    executions = {size: count - before.executions.get(size, 0)
                  for size, count in sorted(now.executions.items())
                  if count - before.executions.get(size, 0) > 0}
    quantiles = now.quantiles_us if requests else {}
    return LiveSample(
        time=wall, interval_s=interval, model=now.name, version=now.version,
        requests_per_s=requests / interval,
        inferences_per_s=(now.inference_count - before.inference_count) / interval,
        failures=now.fail_count - before.fail_count,
        p50_us=quantiles.get(0.5), p95_us=quantiles.get(0.95), p99_us=quantiles.get(0.99),
        queue_us=(now.queue_ns - before.queue_ns) / requests / 1000 if requests else None,
        compute_us=(now.compute_ns - before.compute_ns) / requests / 1000 if requests else None,
        batch_sizes=executions, pending=now.pending)


__all__ = ["RemoteLiveStatistics"]
