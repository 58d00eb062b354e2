"""The queue-time autoscaling policy of the Ray application (workbench.ray.autoscaling): the
HPA's rule on the replicas' mean queue µs per request, bounds, and the scale-down window.
Pure functions over Serve's context: no Ray needed (a plain stand-in for its fields)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from workbench.ray.autoscaling import QueueTimePolicy, desired_replicas
from workbench.ray.queue_signal import QUEUE_METRIC, QueueTime


def context(current: int, queue_us: list[float], now: float, state: dict[str, Any] | None = None,
            low: int = 1, high: int = 4) -> SimpleNamespace:
    return SimpleNamespace(current_num_replicas=current, capacity_adjusted_min_replicas=low,
                           capacity_adjusted_max_replicas=high, current_time=now, policy_state=state or {},
                           aggregated_metrics={QUEUE_METRIC: {f"r{i}": v for i, v in enumerate(queue_us)}})


def test_hpa_rule_with_its_tolerance() -> None:
    assert desired_replicas(2, 30_000, 10_000) == 6
    assert desired_replicas(2, 10_500, 10_000) == 2  # within 10 %
    assert desired_replicas(3, 0.0, 10_000) == 0


def test_scales_up_at_once_and_down_after_the_window() -> None:
    policy = QueueTimePolicy(target_queue_us=10_000, downscale_delay_s=5)
    count, state = policy(context(1, [25_000], now=0.0))
    assert count == 3
    count, state = policy(context(3, [0.0, 0.0, 0.0], now=1.0, state=state))
    assert count == 3  # the recommendation of 3 at t=0 is still in the window
    count, state = policy(context(3, [0.0, 0.0, 0.0], now=7.0, state=state))
    assert count == 1
    assert policy(context(1, [1e9], now=8.0, state=state))[0] == 4  # capped at the maximum


def test_queue_signal_is_the_mean_since_the_last_sample() -> None:
    signal = QueueTime()
    stats: Any = None
    signal.observe(stats, 0, 2_000_000)
    signal.observe(stats, 0, 4_000_000)
    assert signal.sample() == {QUEUE_METRIC: 3000.0}
    assert signal.sample() == {QUEUE_METRIC: 0.0}
