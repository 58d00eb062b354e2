"""The mirror (shadow) of a rollout: a share of a model's primary requests also runs on a
candidate version, whose answers are compared and never returned (a product extension:
Triton has none; :mod:`workbench.engine.rollout.rollouts`).

:meth:`Mirror.offer` is called by :meth:`~workbench.engine.api.server.Server.infer` after the
primary response is built and before it is returned: it only decides (sampling, the cap) and
starts a task, so the primary waits for no mirrored work. The mirrored copy runs on the
candidate's own scheduler and instances, beside the primary traffic:

- shed first under load: a copy is dropped and counted as ``shed`` when ``max_in_flight``
  mirrored requests already run, or when the primary version is busy (other requests of it
  queued or executing when this one is answered: ``Scheduler.inflight_count() > 0``), so
  mirrored work takes only capacity the primary traffic leaves idle (``bench/RESULTS.md``,
  "Issue 32: mirror cost", has what it costs);
- isolated: a candidate failure (an error, the candidate not READY) is counted in
  ``candidate_errors`` with its last message and never reaches the client;
- not mirrored: requests that ran on the candidate itself, requests of a sequence
  (``sequence_id`` set: a copy would start or advance a sequence on the candidate), requests
  with shared-memory inputs or outputs (the client may reuse the region once answered), and
  decoupled models and streams (``Server.infer_stream``).

The candidate's statistics (Triton's per-version statistics and metrics) count the mirrored
inferences it ran. Latencies are microseconds from the request's arrival (primary) or from
the copy's start (candidate) to its response; the p99 is over the last
:data:`LATENCY_WINDOW` mirrored requests.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from workbench.common.errors import WorkbenchError
from workbench.engine.inference.model import LoadedModel
from workbench.engine.rollout.agreement import OutputAgreement, metric_for
from workbench.messages.types import InferenceRequest, InferenceResponse

#: latencies kept per side for the p99 (the most recent ones)
LATENCY_WINDOW = 1000


class Mirror:
    """The mirror of one model's rollout and its live report.

    Args:
        model: the model's name.
        candidate: the version the copies run on.
        percent: the share of primary requests mirrored, 0-100.
        max_in_flight: the most mirrored requests running at once (>= 1).
        resolve: ``(model, version) -> LoadedModel`` (raises when the version is not READY).
    """

    def __init__(self, model: str, candidate: int, percent: float, max_in_flight: int,
                 resolve: Callable[[str, str], LoadedModel]) -> None:
        self.model = model
        self.candidate = candidate
        self.percent = percent
        self.max_in_flight = max_in_flight
        self._resolve = resolve
        self._tasks: set[asyncio.Task[None]] = set()
        self.mirrored = 0
        self.shed = 0
        self.candidate_errors = 0
        self.last_error = ""
        self._primary_us: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._candidate_us: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._agreement: dict[str, OutputAgreement] = {}

    @property
    def in_flight(self) -> int:
        """Mirrored requests running now."""
        return len(self._tasks)

    def offer(self, request: InferenceRequest, model: LoadedModel, response: InferenceResponse,
              arrival_ns: int) -> None:
        """Mirror ``request`` (answered by ``model`` with ``response``) when it is sampled and
        the cap allows; returns at once (the copy runs in a task)."""
        if model.version == self.candidate or model.decoupled or request.parameters.get("sequence_id"):
            return
        if self.percent < 100 and random.random() * 100 >= self.percent:
            return
        if len(self._tasks) >= self.max_in_flight or model.scheduler.inflight_count() > 0:
            self.shed += 1
            return
        primary_us = (time.monotonic_ns() - arrival_ns) / 1000
        copy = InferenceRequest(request.model_name, request.inputs, str(self.candidate),
                                request.outputs, request.id, dict(request.parameters))
        task = asyncio.get_running_loop().create_task(self._run(copy, response, primary_us))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, copy: InferenceRequest, primary: InferenceResponse, primary_us: float) -> None:
        start = time.monotonic_ns()
        try:
            candidate = self._resolve(copy.model_name, copy.model_version)
            answer = await candidate.infer(copy, start)
        except WorkbenchError as exc:
            self.candidate_errors += 1
            self.last_error = exc.message
            return
        except Exception as exc:  # noqa: BLE001 - a candidate's failure never reaches a client
            self.candidate_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        self.mirrored += 1
        self._primary_us.append(primary_us)
        self._candidate_us.append((time.monotonic_ns() - start) / 1000)
        outputs = {t.name: t for t in answer.outputs}
        for tensor in primary.outputs:
            theirs = outputs.get(tensor.name)
            if theirs is None:
                continue
            agreement = self._agreement.get(tensor.name)
            if agreement is None:
                agreement = self._agreement[tensor.name] = OutputAgreement(metric_for(tensor))
            agreement.add(tensor.data, theirs.data)

    async def settle(self) -> None:
        """Wait until no mirrored request is in flight (copies started meanwhile included)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Wait for the mirrored requests in flight (they finish; none is started after)."""
        self.percent = 0
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def report(self) -> dict[str, object]:
        """The live figures: ``{"candidate", "percent", "max_in_flight", "in_flight",
        "mirrored", "shed", "candidate_errors", "last_error", "latency_us": {"primary":
        {"mean", "p99"}, "candidate": {...}}, "agreement": {output: {...}}}`` (see
        :meth:`~workbench.engine.rollout.agreement.OutputAgreement.report`)."""
        return {
            "candidate": self.candidate, "percent": self.percent, "max_in_flight": self.max_in_flight,
            "in_flight": self.in_flight, "mirrored": self.mirrored, "shed": self.shed,
            "candidate_errors": self.candidate_errors, "last_error": self.last_error,
            "latency_us": {"primary": _latency(self._primary_us), "candidate": _latency(self._candidate_us)},
            "agreement": {name: a.report() for name, a in sorted(self._agreement.items())},
        }


def _latency(values: deque[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p99": None}
    data = np.fromiter(values, float, len(values))
    return {"mean": round(float(data.mean()), 1), "p99": round(float(np.percentile(data, 99)), 1)}


__all__ = ["LATENCY_WINDOW", "Mirror"]
