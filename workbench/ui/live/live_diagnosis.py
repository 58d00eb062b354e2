"""Why is p99 high? One sentence from a window of live samples, shown beside the Live plots.

A pure function (:func:`diagnose`) of :class:`~workbench.serving.live_stats.LiveSample` values: no
engine, no clock. The window is the samples with traffic in the last :data:`WINDOW_S` seconds
before the latest one; their figures are weighted by each interval's request count
(:class:`Window`). The first rule that matches names the cause:

=================  ===========================================================================
rule               when (``q``, ``c``, ``r``: queue, compute and request p99; ``d``: the delay)
=================  ===========================================================================
``no_traffic``     no request in the window
``failing``        at least 1 % of the window's requests failed
``unknown``        the samples have no request, queue or compute percentiles (a server attached
                   by URL: its statistics API has means only): nothing is made up from them
``delay``          ``q >= r/2``, the batcher has a delay, batches leave under :data:`FULL` of
                   their target (the largest preferred size, else ``max_batch_size``) and
                   ``q <= 1.5 d + 200 µs`` or the *mean* queue time is between ``d/2`` and that
                   (p99 spikes of a busy machine beyond the delay do not hide it): requests wait
                   out the delay for batches that do not fill
``small_batches``  ``q >= r/2``, batches leave under half their target, ``q`` beyond the delay:
                   requests queue while idle instances take them a few at a time
``wait_instance``  ``q >= r/2`` otherwise (full batches, or a model that does not batch):
                   every instance is busy
``compute``        ``c >= r/2`` and ``r > HEALTHY_RATIO * p50``: the model itself is slow
``healthy``        ``r <= HEALTHY_RATIO * p50`` (queue not dominant): nothing is wrong
``mixed``          none of the above: no single cause
=================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.serving.live_stats import LiveSample
from workbench.stats.statistics import BatchingLimits

#: seconds of samples before the latest one that a diagnosis reads
WINDOW_S = 30.0
#: p99 within this multiple of p50 is not "high"
HEALTHY_RATIO = 2.0
#: a batch at this share of its target counts as full
FULL = 0.9
#: failed share of the window's requests that is reported before any latency cause
FAILING_SHARE = 0.01
#: slack over the queue delay that still counts as "waiting out the delay", microseconds
DELAY_SLACK_US = 200.0


@dataclass(frozen=True, slots=True)
class Window:
    """What the window's samples with traffic add up to (latencies in **microseconds**; None:
    no sample of the window has that figure).

    ``mean_batch``: inferences per execution (0 without executions); ``pending``: the most
    requests queued at an interval's end; ``queue_mean_us``: the mean queue time.
    """

    seconds: float
    requests: int
    failures: int
    p50_us: float | None
    p99_us: float | None
    queue_p99_us: float | None
    compute_p99_us: float | None
    mean_batch: float
    pending: int
    limits: BatchingLimits
    queue_mean_us: float | None = None

    @property
    def target(self) -> int:
        """The batch size a full batch has: the largest preferred size, else max_batch_size."""
        return max(self.limits.preferred, default=self.limits.max_batch_size)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """``rule``: the rule that matched (module table); ``text``: the sentence shown."""

    rule: str
    text: str


def window_of(samples: Sequence[LiveSample], seconds: float = WINDOW_S) -> Window | None:
    """The figures of the samples with traffic in the last ``seconds`` before the latest
    sample (None: no traffic there). Percentiles are request-weighted means of the intervals'.
    ``samples`` are in time order."""
    if not samples:
        return None
    start = samples[-1].time - seconds
    busy = []
    for sample in reversed(samples):  # from the latest back: only the window is read
        if sample.time <= start:
            break
        if sample.busy:
            busy.append(sample)
    busy.reverse()
    if not busy:
        return None
    weights = [s.requests_per_s * s.interval_s for s in busy]
    total = sum(weights)

    def mean(values: list[float | None]) -> float | None:
        pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None and w > 0]
        weight = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / weight if weight else None

    executions = sum(c for s in busy for c in s.batch_sizes.values())
    inferences = sum(size * c for s in busy for size, c in s.batch_sizes.items())
    return Window(
        seconds=seconds, requests=round(total), failures=sum(s.failures for s in busy),
        p50_us=mean([s.p50_us for s in busy]), p99_us=mean([s.p99_us for s in busy]),
        queue_p99_us=mean([s.queue_p99_us for s in busy]),
        compute_p99_us=mean([s.compute_p99_us for s in busy]),
        mean_batch=inferences / executions if executions else 0.0,
        pending=max(s.pending for s in busy), limits=busy[-1].limits,
        queue_mean_us=mean([s.queue_us for s in busy]))


def diagnose(samples: Sequence[LiveSample], seconds: float = WINDOW_S) -> Diagnosis:
    """The cause of the window's p99 as one sentence (see the module table)."""
    window = window_of(samples, seconds)
    if window is None:
        return Diagnosis("no_traffic", f"No traffic in the last {seconds:.0f} s: nothing to diagnose.")
    w = window
    attempted = w.requests + w.failures
    if w.failures and w.failures >= FAILING_SHARE * attempted:
        return Diagnosis("failing", (
            f"Requests fail: {w.failures} of {attempted} ({100 * w.failures / attempted:.1f} %) in "
            f"the last {seconds:.0f} s; the latencies count only the successful ones: look at the "
            "failures first (the server log)."))
    r, q, c, p50 = w.p99_us, w.queue_p99_us, w.compute_p99_us, w.p50_us
    if r is None or q is None or c is None or p50 is None:
        missing = ("request latency percentiles (attach with a /metrics URL of a server started with "
                   "--metrics-config summary_latencies=true)" if r is None or p50 is None
                   else "queue and compute percentiles per interval (an attached server's statistics "
                   "API has means only: the queue vs compute plot shows them)")
        return Diagnosis("unknown", f"Cannot say why: this server reports no {missing}.")
    if q >= r / 2:
        return _queue_cause(w, r, q)
    if r <= HEALTHY_RATIO * p50:
        return Diagnosis("healthy", (
            f"Nothing is wrong: p99 {_t(r)} is {r / p50:.1f}x p50 ({_t(p50)}); "
            f"queue {_t(q)}, compute {_t(c)} at p99."))
    if c >= r / 2:
        fewer = " or fewer instances sharing the CPU cores" if w.limits.instances > 1 else ""
        return Diagnosis("compute", (
            f"p99 is compute time: compute p99 {_t(c)} of {_t(r)} (p50 {_t(p50)}){_at(w)}; "
            f"the model itself is slow there: a smaller max_batch_size{fewer}, or a faster "
            "backend or device."))
    return Diagnosis("mixed", (
        f"p99 {_t(r)} is {r / p50:.1f}x p50 with no single cause: queue {_t(q)}, compute "
        f"{_t(c)} at p99; the rest is the server's input and output handling."))


def _queue_cause(w: Window, r: float, q: float) -> Diagnosis:
    """The queue rules (``q >= r/2``; ``r``, ``q``: request and queue p99, µs): the delay,
    small batches or busy instances."""
    limits = w.limits
    delay = limits.max_queue_delay_us
    batches = limits.max_batch_size > 0 and w.mean_batch > 0
    fill = w.mean_batch / w.target if batches and w.target else 1.0
    bound = 1.5 * (delay or 0) + DELAY_SLACK_US
    waits_out = delay and (q <= bound or (w.queue_mean_us is not None and delay / 2 <= w.queue_mean_us <= bound))
    if delay and fill < FULL and waits_out:
        return Diagnosis("delay", (
            f"The batcher's delay dominates: requests wait up to the {delay} µs delay (queue p99 "
            f"{_t(q)} of {_t(r)}) for batches that leave at {w.mean_batch:.1f} of {w.target}; "
            "lower max_queue_delay_microseconds, or send more requests at once so batches fill."))
    if batches and fill < 0.5:
        after = ("without a dynamic batcher" if delay is None
                 else f"after the {delay} µs delay" if delay else "with no queue delay")
        advice = ("add dynamic_batching so queued requests run together" if delay is None
                  else "raise the delay or lower the instance count" if limits.instances > 1
                  else "raise the delay (max_queue_delay_microseconds) so batches fill")
        return Diagnosis("small_batches", (
            f"p99 is queue time: batches leave at {w.mean_batch:.1f} of {w.target} {after} while "
            f"requests queue {_t(q)} of {_t(r)}; {advice}."))
    if batches:
        state = f"batches leave at {w.mean_batch:.1f} of {w.target}"
        advice = "add instances (instance_group count) or raise max_batch_size"
    else:
        state = "the model does not batch" if limits.max_batch_size == 0 else "no executions"
        advice = "add instances (instance_group count) or let the model batch"
    return Diagnosis("wait_instance", (
        f"Requests wait for an instance: queue p99 {_t(q)} of {_t(r)}, up to {w.pending} pending, "
        f"{limits.instances} instance{'s' if limits.instances != 1 else ''}, {state}; {advice}."))


def _at(w: Window) -> str:
    return f" at batches of {w.mean_batch:.1f}" if w.mean_batch else ""


def _t(us: float) -> str:
    """A duration for the sentence: ``850 µs``, ``12.3 ms``, ``2.10 s``."""
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1e6:.2f} s"


__all__ = ["FULL", "HEALTHY_RATIO", "WINDOW_S", "Diagnosis", "Window", "diagnose", "window_of"]
