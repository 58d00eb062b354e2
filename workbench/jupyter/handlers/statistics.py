"""Statistics: Triton's cumulative statistics, and a live per-interval stream.

``GET api/statistics[?model=m[&version=v]]``   Triton's statistics JSON (``/v2/models/stats``)
``GET api/statistics/stream[?interval_s=1]``   Server-Sent Events (``text/event-stream``): every
                                               ``interval_s`` seconds (0.1 to 60; default
                                               ``c.Workbench.statistics_interval_s``) one
                                               ``data: {"samples": [...]}`` line, one sample per
                                               READY model version
                                               (:meth:`workbench.serving.live_stats.LiveSample.as_dict`:
                                               throughput, p50/p95/p99 in µs, queue vs compute,
                                               batch sizes, pending)

The stream's :class:`~workbench.serving.live_stats.LiveStatistics` is attached to the engine only
while a client reads: it is closed as soon as the client goes away, or when the engine stops
(the stream then ends after its current interval).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.iostream import StreamClosedError

from workbench import InvalidArgument
from workbench.jupyter.handlers.base import WorkbenchHandler
from workbench.serving.live_stats import LiveSample

#: the stream intervals a request may ask for, seconds
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 60.0


class StatisticsHandler(WorkbenchHandler):
    """``GET api/statistics``: Triton's statistics of every (or one) model version."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        model = self.get_query_argument("model", "")
        version = self.get_query_argument("version", "")
        self.reply(await self.engine().statistics(model, version))


class StatisticsStreamHandler(WorkbenchHandler):
    """``GET api/statistics/stream``: live samples as Server-Sent Events."""

    _gone: asyncio.Event | None = None

    @web.authenticated
    @authorized
    async def get(self) -> None:
        interval = self._interval()
        self._gone = asyncio.Event()
        live = self.host.watch()
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # proxies must not buffer the stream
        samples = live.stream(interval)
        try:
            await self.flush()  # the headers go now: the client sees the stream open
            while (batch := await _next_unless(samples, self._gone)) is not None:
                event = json.dumps({"samples": [sample.as_dict() for sample in batch]})
                self.write(f"data: {event}\n\n")
                await self.flush()
        except StreamClosedError:
            self._gone.set()
        finally:
            await samples.aclose()
            self.host.unwatch(live)
        if not self._gone.is_set():
            self.finish(set_content_type="text/event-stream")  # the engine stopped

    def _interval(self) -> float:
        default = self.settings.get("workbench_statistics_interval_s", 1.0)
        text = self.get_query_argument("interval_s", str(default))
        try:
            interval = float(text)
        except ValueError:
            interval = math.nan
        if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
            raise InvalidArgument(
                f"interval_s must be a number of seconds from {MIN_INTERVAL_S} to {MAX_INTERVAL_S}, got '{text}'")
        return interval

    def on_connection_close(self) -> None:
        if self._gone is not None:  # the client went away: stop now, not at the next sample
            self._gone.set()


async def _next_unless(samples: AsyncIterator[list[LiveSample]], gone: asyncio.Event) -> list[LiveSample] | None:
    """The next batch of ``samples``; None once they end or as soon as ``gone`` is set."""
    step = asyncio.ensure_future(anext(samples, None))
    stop = asyncio.ensure_future(gone.wait())
    done, pending = await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return step.result() if step in done else None


__all__ = ["StatisticsHandler", "StatisticsStreamHandler"]
