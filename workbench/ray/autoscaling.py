"""A Ray Serve autoscaling policy on the engine's queue time per request, the signal the
Kubernetes HPA of ``workbench deploy`` scales on (:mod:`workbench.deploy.kubernetes`).

Each replica reports its mean queue µs per request since its last report
(:mod:`workbench.ray.queue_signal`, through Serve's ``record_autoscaling_stats``); the
policy takes the mean over the running replicas and applies the HPA's rule, ``desired =
ceil(current × metric / target)``, with its 10 % tolerance, between the deployment's
``min_replicas`` and ``max_replicas``. A scale-down waits until every recommendation of
the last ``downscale_delay_s`` seconds is at most the new count (the HPA's stabilization
window); a scale-up is taken at once.
"""

from __future__ import annotations

import math
from typing import Any

from workbench.ray.queue_signal import QUEUE_METRIC

#: the HPA's default tolerance: no change while metric / target is within 10 % of 1
TOLERANCE = 0.1


def desired_replicas(current: int, queue_us: float, target_us: float) -> int:
    """The HPA rule: ``ceil(current × queue_us / target_us)``, or ``current`` within the
    tolerance. ``current`` >= 1; with no queue time at all the answer is 0 (the caller
    bounds it)."""
    ratio = queue_us / target_us
    if abs(ratio - 1.0) <= TOLERANCE:
        return current
    return math.ceil(current * ratio)


class QueueTimePolicy:
    """Serve's custom policy (``AutoscalingPolicy(policy_function=...)``, a class: Serve
    builds it once with ``policy_kwargs`` and calls it every autoscaling tick).

    Args:
        target_queue_us: the queue time per request to hold, µs (the HPA's
            ``queue_time_target_us``).
        downscale_delay_s: how long recommendations below the current count must last.
    """

    def __init__(self, target_queue_us: float = 10_000.0, downscale_delay_s: float = 30.0) -> None:
        self.target_queue_us = target_queue_us
        self.downscale_delay_s = downscale_delay_s

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        """One decision.

        Args:
            ctx: Serve's ``AutoscalingContext`` (``aggregated_metrics``: metric -> replica ->
                value over Serve's look-back window; ``current_num_replicas``;
                ``capacity_adjusted_min_replicas`` / ``_max_replicas``; ``policy_state``;
                ``current_time``, seconds).

        Returns:
            The replica count and the policy state to keep (the recent recommendations).
        """
        current = max(int(ctx.current_num_replicas), 1)
        per_replica = (ctx.aggregated_metrics or {}).get(QUEUE_METRIC, {})
        queue_us = sum(per_replica.values()) / len(per_replica) if per_replica else 0.0
        wanted = desired_replicas(current, queue_us, self.target_queue_us)
        wanted = min(max(wanted, ctx.capacity_adjusted_min_replicas), ctx.capacity_adjusted_max_replicas)
        now = float(ctx.current_time or 0.0)
        history = [(t, n) for t, n in (ctx.policy_state or {}).get("recommendations", [])
                   if now - t <= self.downscale_delay_s]
        history.append((now, wanted))
        # the HPA's stabilization window: scale down only to the highest recent recommendation
        decision = wanted if wanted >= current else min(current, max(n for _, n in history))
        return decision, {"recommendations": history, "queue_us": queue_us}
