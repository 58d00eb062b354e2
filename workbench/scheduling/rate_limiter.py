"""Triton's rate limiter (``--rate-limit=execution_count``).

Each instance group may declare ``rate_limiter { resources [ { name, count, global } ]
priority }``. An instance executes only while it holds all its resources; the pool
of a resource is the ``--rate-limit-resource NAME:COUNT[:DEVICE]`` given for it,
otherwise the largest count any instance asks for (per device, or once for
``global`` resources), as Triton's rate limiter sizes it. Schedulers whose free
instances wait for resources are woken when resources are released, instances
with the lower ``priority`` value first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from workbench.backends.base import InstanceSpec

log = logging.getLogger(__name__)

#: (resource name, device id or None for a global resource)
ResourceKey = tuple[str, int | None]


def parse_resource(text: str) -> tuple[ResourceKey, int]:
    """``NAME:COUNT[:DEVICE]`` (tritonserver ``--rate-limit-resource``) -> (key, count).

    Raises:
        ValueError: malformed text.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
        raise ValueError(f"invalid rate limit resource '{text}', expected NAME:COUNT[:DEVICE]")
    device = int(parts[2]) if len(parts) == 3 else None
    return (parts[0].lower(), device), int(parts[1])


class RateLimiter:
    """Resource pools shared by every model instance of the server.

    Args:
        explicit: pools fixed on the command line, by (name, device or None).
    """

    def __init__(self, explicit: dict[ResourceKey, int] | None = None) -> None:
        self._explicit = dict(explicit or {})
        self._capacity = dict(self._explicit)
        self._used: dict[ResourceKey, int] = {}
        self._waiters: dict[Callable[[], None], int] = {}

    @staticmethod
    def needs(spec: InstanceSpec) -> dict[ResourceKey, int]:
        """The resources one execution of this instance holds."""
        return {
            (name.lower(), None if is_global else spec.device_id): count
            for name, is_global, count in spec.resources
        }

    def register(self, specs: Iterable[InstanceSpec]) -> None:
        """Size the implicit pools for these instances; warn when an explicit pool is too small."""
        for spec in specs:
            for key, count in self.needs(spec).items():
                if key in self._explicit:
                    if self._explicit[key] < count:
                        log.warning(
                            'Resource count for "%s" is limited to %d which will prevent scheduling '
                            "of one or more model instances, the minimum required count is %d",
                            key[0], self._explicit[key], count,
                        )
                else:
                    self._capacity[key] = max(self._capacity.get(key, 0), count)

    def available(self, needs: dict[ResourceKey, int]) -> bool:
        return all(self._used.get(k, 0) + n <= self._capacity.get(k, 0) for k, n in needs.items())

    def acquire(self, needs: dict[ResourceKey, int]) -> None:
        for key, count in needs.items():
            self._used[key] = self._used.get(key, 0) + count

    def release(self, needs: dict[ResourceKey, int]) -> None:
        """Return resources and wake the waiting schedulers (lower priority value first)."""
        for key, count in needs.items():
            self._used[key] -= count
        if needs and self._waiters:
            waiters = sorted(self._waiters.items(), key=lambda item: item[1])
            self._waiters.clear()
            loop = asyncio.get_running_loop()
            for wake, _ in waiters:
                loop.call_soon(wake)

    def wait(self, wake: Callable[[], None], priority: int) -> None:
        """Call ``wake()`` (soon, on the loop) after the next release of any resource."""
        self._waiters[wake] = min(priority, self._waiters.get(wake, priority))
