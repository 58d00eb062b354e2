"""Triton's rate limiter (``--rate-limit=execution_count``).

Each instance group may declare ``rate_limiter { resources [ { name, count, global } ]
priority }``. An instance executes only while it holds all its resources. As Triton's
rate limiter sizes the pools: without ``--rate-limit-resource`` a resource's pool is the
largest count any instance asks for (per device, or once for ``global`` resources); with
any ``--rate-limit-resource`` given, the pools are those flags' counts
(:func:`explicit_count`: ``NAME:COUNT`` is every device's pool, ``NAME:COUNT:DEVICE`` one
device's, a global resource takes the largest count of its name) and a resource none of
them names has none. :func:`check_resources` refuses an instance no pool can ever hold,
and a resource both global and per-device (in one model, or global in one and per-device in
another the rate limiter holds instances of), with Triton's texts. Resource names keep their
case (Triton compares them as given; its ``--rate-limit-resource`` parser lowercases a copy
it never uses). Instances leave the pools when they unload (:meth:`RateLimiter.unregister`,
Triton's ``RemoveModelInstance``). Schedulers whose free instances wait for resources are
woken when resources are released, instances with the lower ``priority`` value first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable

from workbench.backends.base import InstanceSpec
from workbench.errors import InvalidArgument

#: (resource name, device id or None for a global resource)
ResourceKey = tuple[str, int | None]

_log = logging.getLogger(__name__)


def parse_resource(text: str) -> tuple[ResourceKey, int]:
    """``NAME:COUNT[:DEVICE]`` (tritonserver ``--rate-limit-resource``) -> (key, count).

    Raises:
        ValueError: malformed text.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
        raise ValueError(f"invalid rate limit resource '{text}', expected NAME:COUNT[:DEVICE]")
    device = int(parts[2]) if len(parts) == 3 else None
    return (parts[0], device), int(parts[1])


def explicit_pools(texts: Iterable[str]) -> dict[ResourceKey, int]:
    """Every ``--rate-limit-resource`` parsed (:func:`parse_resource`; a later one for the same
    name and device replaces an earlier one, as in Triton).

    Raises:
        InvalidArgument: a malformed one.
    """
    try:
        return dict(parse_resource(text) for text in texts)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def explicit_count(explicit: dict[ResourceKey, int], key: ResourceKey) -> int:
    """The pool the ``--rate-limit-resource`` flags give resource ``key`` (0: none names it).

    Follows Triton's ``ParseAndValidateExplicitResources``: a global resource (device None)
    takes the largest count given for its name on any device or none; a per-device one the
    larger of its device's count and the every-device (``NAME:COUNT``) count.
    """
    name, device = key
    if device is None:
        return max((count for (n, _), count in explicit.items() if n == name), default=0)
    return max(explicit.get((name, device), 0), explicit.get((name, None), 0))


def check_resources(specs: Iterable[InstanceSpec], explicit: dict[ResourceKey, int],
                    registered: Iterable[ResourceKey] = ()) -> None:
    """Refuse instances the rate limiter could never schedule (Triton's texts).

    Args:
        specs: the instances of one model version.
        explicit: the ``--rate-limit-resource`` pools (empty: pools sized to the instances).
        registered: the resources of the instances the rate limiter holds now
            (:meth:`RateLimiter.resource_keys`): Triton checks an added instance against
            every model's (``ValidateMaxResources`` over all instances).

    Raises:
        InvalidArgument: a resource is both global and per-device, in ``specs`` or between
            them and ``registered`` ('Resource "<name>" is present as both global and
            device-specific resource in the model configuration.'); or an explicit pool is
            smaller than one instance's count
            ('Resource count for "<name>" is limited to <pool> which will prevent scheduling
            of one or more model instances, the minimum required count is <count>').
    """
    largest: dict[ResourceKey, int] = {}
    for spec in specs:
        for key, count in RateLimiter.needs(spec).items():
            largest[key] = max(largest.get(key, 0), count)
    keys = [*largest, *registered]
    global_names = {name for name, device in keys if device is None}
    for name, device in keys:
        if device is not None and name in global_names:
            raise InvalidArgument(f'Resource "{name}" is present as both global and device-specific '
                                  "resource in the model configuration.")
    if not explicit:
        return
    for key, count in largest.items():
        pool = explicit_count(explicit, key)
        if pool < count:
            raise InvalidArgument(
                f'Resource count for "{key[0]}" is limited to {pool} which will prevent scheduling '
                f"of one or more model instances, the minimum required count is {count}")


class RateLimiter:
    """Resource pools shared by every model instance of the server.

    Args:
        explicit: pools fixed on the command line, by (name, device or None).
    """

    def __init__(self, explicit: dict[ResourceKey, int] | None = None) -> None:
        self._explicit = dict(explicit or {})
        self._capacity: dict[ResourceKey, int] = {}
        #: the registered instances' needs, by id of their spec (the spec kept alive with them)
        self._registered: dict[int, tuple[InstanceSpec, dict[ResourceKey, int]]] = {}
        self._used: dict[ResourceKey, int] = {}
        self._waiters: dict[Callable[[], None], int] = {}

    @staticmethod
    def needs(spec: InstanceSpec) -> dict[ResourceKey, int]:
        """The resources one execution of this instance holds."""
        return {
            (name, None if is_global else spec.device_id): count
            for name, is_global, count in spec.resources
        }

    def resource_keys(self) -> frozenset[ResourceKey]:
        """The resources the registered instances use (what :func:`check_resources`
        checks a new model against)."""
        return frozenset(key for _, needs in self._registered.values() for key in needs)

    def register(self, specs: Iterable[InstanceSpec]) -> None:
        """Size the pools these instances use: the explicit pool when any
        ``--rate-limit-resource`` is given (:func:`explicit_count`), else the largest count
        asked for. (Instances no pool can hold were refused before: :func:`check_resources`.)"""
        for spec in specs:
            needs = self.needs(spec)
            self._registered[id(spec)] = (spec, needs)
            for key, count in needs.items():
                if self._explicit:
                    self._capacity[key] = explicit_count(self._explicit, key)
                else:
                    self._capacity[key] = max(self._capacity.get(key, 0), count)
        self._log_pools()

    def unregister(self, specs: Iterable[InstanceSpec]) -> None:
        """These instances left (unloaded): without explicit pools, the pools are sized
        again to the largest counts the remaining instances ask for (Triton's
        ``RemoveModelInstance`` -> ``ComputeResourceLimits``). Resources held by an
        execution still under way are released as usual."""
        for spec in specs:
            self._registered.pop(id(spec), None)
        if not self._explicit:
            self._capacity = {}
            for _, needs in self._registered.values():
                for key, count in needs.items():
                    self._capacity[key] = max(self._capacity.get(key, 0), count)
        self._log_pools()

    def _log_pools(self) -> None:
        """Log (verbose) the pools the registered instances use, as Triton's
        ``UpdateResourceLimits`` does after each change: its ``Max Resource Map`` (global
        resources, then each device, names sorted), written escaped on one line with its
        quotes as Triton's logger writes every message (``\\t Count: N``); L0_model_update
        ``test_instance_resource_decrease`` reads it."""
        if not _log.isEnabledFor(logging.DEBUG):
            return
        by_device: dict[int | None, dict[str, int]] = {}
        for key in sorted(self.resource_keys(), key=lambda k: (k[1] is not None, k[1] or 0, k[0])):
            pool = explicit_count(self._explicit, key) if self._explicit else self._capacity.get(key, 0)
            by_device.setdefault(key[1], {})[key[0]] = pool
        text = "\nMax Resource Map===>\n"
        for device, pools in by_device.items():
            text += f"\tDevice: {'GLOBAL' if device is None else device}\n"
            text += "".join(f"\t\tResource: {name}\t Count: {count}\n" for name, count in pools.items())
        _log.debug("%s", json.dumps(text, ensure_ascii=False))

    def available(self, needs: dict[ResourceKey, int]) -> bool:
        """Whether every resource in ``needs`` has that many units free now."""
        return all(self._used.get(k, 0) + n <= self._capacity.get(k, 0) for k, n in needs.items())

    def acquire(self, needs: dict[ResourceKey, int]) -> None:
        """Take the resources of one execution (checked with :meth:`available` first)."""
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
