"""Stopping an engine within the exit budget, the last step of every host's shutdown
(``workbench serve`` after its HTTP drain, the Jupyter host when Jupyter stops)."""

from __future__ import annotations

import asyncio
import logging
import time

from workbench import Server, ServerOptions

log = logging.getLogger("workbench")


async def drain_engine(server: Server, options: ServerOptions, started: float | None) -> bool:
    """Stop the engine: queued and executing requests finish, then models unload, within
    ``exit_timeout_secs`` (0 = no limit) counted from ``started`` (``time.monotonic()`` when
    the shutdown began; None = now): the HTTP drain and this one share one budget.

    Returns:
        True when every model unloaded; False when the exit timeout cut the drain short
        (backend threads may still be executing: the process should exit at once, see
        :func:`workbench.hosts.serve.run`)."""
    budget = options.exit_timeout_secs
    if budget and started is not None:
        budget = max(0.0, budget - (time.monotonic() - started))
    log.info("Waiting for in-flight requests to complete.")  # tritonserver's line
    log.info("stopping: waiting for in-flight requests (up to %.1fs)", budget)
    countdown = asyncio.ensure_future(_count_down(server, budget))
    try:
        await asyncio.wait_for(server.stop(), timeout=budget if options.exit_timeout_secs else None)
        log.info("all models unloaded; exiting")
        return True
    except TimeoutError:
        log.warning("exit timeout reached; exiting with requests still in flight")
        return False
    finally:
        countdown.cancel()


async def _count_down(server: Server, budget: float) -> None:
    """tritonserver's countdown while inferences are in flight (its ``Server::Stop``), once a
    second: ``Timeout N: Found K model versions that have in-flight inferences`` and
    ``Model 'm' (version v) has N in-flight inferences`` for each; N is the seconds left
    (the exit timeout; 0 = none)."""
    left = int(budget)
    while status := server.lifecycle.inflight_status():
        log.info("Timeout %d: Found %d model versions that have in-flight inferences", left, len(status))
        for name, version, count in status:
            log.info("Model '%s' (version %d) has %d in-flight inferences", name, version, count)
        await asyncio.sleep(1.0)
        left = max(0, left - 1)


__all__ = ["drain_engine"]
