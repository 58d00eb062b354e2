"""The Live tab's one-line diagnosis: each rule on a synthetic trace (table-driven), no engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.serving.live_stats import LiveSample
from workbench.stats.statistics import BatchingLimits
from workbench.ui.live.live_diagnosis import diagnose, window_of

BATCHING = BatchingLimits(max_batch_size=16, preferred=(), max_queue_delay_us=100, instances=4)
LONG_DELAY = BatchingLimits(max_batch_size=16, preferred=(8,), max_queue_delay_us=20_000, instances=1)
NO_BATCHING = BatchingLimits(max_batch_size=0, instances=2)


def trace(seconds: int = 25, *, p50: float = 2_000, p99: float = 3_000, queue: float = 100,
          compute: float = 1_800, batches: dict[int, int] | None = None, failures: int = 0,
          pending: int = 0, limits: BatchingLimits = BATCHING, idle_after: int = 0,
          rate: float = 100.0) -> list[LiveSample]:
    """``seconds`` one-second samples of steady traffic with these figures (µs), then
    ``idle_after`` idle ones."""
    busy = [LiveSample(time=1000.0 + i, interval_s=1.0, model="m", version="1", requests_per_s=rate,
                       inferences_per_s=rate, failures=failures, p50_us=p50, p95_us=p99, p99_us=p99,
                       queue_us=queue / 2, compute_us=compute / 2, batch_sizes=dict(batches or {1: 100}),
                       pending=pending, queue_p99_us=queue, compute_p99_us=compute, limits=limits)
            for i in range(seconds)]
    idle = [LiveSample(time=1000.0 + seconds + i, interval_s=1.0, model="m", version="1",
                       requests_per_s=0, inferences_per_s=0, failures=0, p50_us=None, p95_us=None,
                       p99_us=None, queue_us=None, compute_us=None, limits=limits)
            for i in range(idle_after)]
    return busy + idle


CASES = {
    # rule: (trace, phrases the sentence must hold)
    "no_traffic": (trace(0, idle_after=10), ["No traffic in the last 30 s"]),
    "idle_since_the_window": (trace(5, idle_after=40), ["No traffic"]),
    "failing": (trace(failures=5), ["Requests fail: 125 of 2625", "4.8 %"]),
    "healthy": (trace(), ["Nothing is wrong: p99 3.0 ms is 1.5x p50"]),
    "delay": (trace(p50=15_000, p99=24_000, queue=21_000, compute=2_000, batches={3: 30},
                    limits=LONG_DELAY),
              ["The batcher's delay dominates", "20000 µs delay", "leave at 3.0 of 8",
               "lower max_queue_delay_microseconds"]),
    # the trial's: a 20 ms delay, 3 clients, batches of 6 of 64, queue p99 pushed to 50 ms by a
    # busy machine while the mean queue time is the delay: not "raise the delay" (it said so)
    "delay_with_spikes": (trace(p50=20_000, p99=56_600, queue=50_500, compute=1_000, batches={6: 20},
                                limits=BatchingLimits(max_batch_size=64, max_queue_delay_us=20_000)),
                          ["The batcher's delay dominates", "leave at 6.0 of 64", "lower max_queue_delay"]),
    "small_batches": (trace(p50=4_000, p99=30_000, queue=25_000, compute=1_500, batches={3: 30}),
                      ["p99 is queue time: batches leave at 3.0 of 16 after the 100 µs delay",
                       "raise the delay or lower the instance count"]),
    "small_batches_without_batcher": (
        trace(p50=4_000, p99=30_000, queue=25_000, compute=1_500, batches={1: 100},
              limits=BatchingLimits(max_batch_size=8, instances=2)),
        ["without a dynamic batcher", "add dynamic_batching"]),
    "small_batches_without_delay": (
        trace(p50=4_000, p99=30_000, queue=25_000, compute=1_500, batches={2: 50},
              limits=BatchingLimits(max_batch_size=8, max_queue_delay_us=0, instances=1)),
        ["batches leave at 2.0 of 8 with no queue delay", "raise the delay (max_queue_delay_microseconds)"]),
    "wait_instance": (trace(p50=20_000, p99=40_000, queue=30_000, compute=8_000, batches={16: 10},
                            pending=40),
                      ["Requests wait for an instance", "up to 40 pending", "4 instances",
                       "batches leave at 16.0 of 16", "add instances"]),
    "wait_instance_no_batching": (trace(p50=10_000, p99=40_000, queue=30_000, compute=8_000,
                                        batches={1: 100}, pending=12, limits=NO_BATCHING),
                                  ["Requests wait for an instance", "the model does not batch"]),
    "compute": (trace(p50=5_000, p99=40_000, queue=1_000, compute=35_000, batches={8: 12}),
                ["p99 is compute time: compute p99 35.0 ms of 40.0 ms", "at batches of 8.0",
                 "fewer instances sharing the CPU cores"]),
    "mixed": (trace(p50=2_000, p99=10_000, queue=3_000, compute=3_000),
              ["no single cause", "queue 3.0 ms, compute 3.0 ms"]),
}
#: the rule a variant case checks
VARIANT_OF = {"idle_since_the_window": "no_traffic", "delay_with_spikes": "delay",
              "small_batches_without_batcher": "small_batches",
              "small_batches_without_delay": "small_batches",
              "wait_instance_no_batching": "wait_instance"}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_on_a_synthetic_trace(case: str) -> None:
    samples, phrases = CASES[case]
    diagnosis = diagnose(samples)
    assert diagnosis.rule == VARIANT_OF.get(case, case)
    for phrase in phrases:
        assert phrase in diagnosis.text, diagnosis.text


def test_the_window_weights_intervals_by_their_requests() -> None:
    slow = trace(1, p50=10_000, p99=10_000, rate=10)
    fast = trace(1, p50=1_000, p99=1_000, rate=90)
    window = window_of([*slow, replace(fast[0], time=1001.0)])
    assert window is not None
    assert window.requests == 100
    assert window.p99_us == pytest.approx(0.1 * 10_000 + 0.9 * 1_000)
    assert window.mean_batch == 1.0


@pytest.mark.parametrize(("percentiles", "phrase"), [
    ({"queue_p99_us": None, "compute_p99_us": None}, "no queue and compute percentiles per interval"),
    ({"p50_us": None, "p95_us": None, "p99_us": None}, "no request latency percentiles"),
])
def test_without_percentiles_nothing_is_made_up(percentiles: dict, phrase: str) -> None:
    """A server attached by URL reports no per-interval queue / compute percentiles (and, without
    a /metrics URL, no request percentiles): the line says so (it said "queue p99 0 µs ... the
    model does not batch; add instances" from the missing figures: new-user trial)."""
    samples = [replace(s, **percentiles, limits=BatchingLimits()) for s in
               trace(p50=4_000, p99=30_000, queue=25_000, compute=1_500)]
    diagnosis = diagnose(samples)
    assert diagnosis.rule == "unknown" and phrase in diagnosis.text, diagnosis.text
    assert "0 µs" not in diagnosis.text
