"""The cluster's shared control state: one Ray actor, :class:`ClusterState`, through which a
control request sent to any replica (a repository load/unload, a rollout change, a
per-replica query) reaches every replica, and from which a new replica takes the state of the
cluster before it serves.

An operation is an HTTP request as plain data (:class:`Op`: method, path, headers, body),
applied by each replica to its own engine's v2 HTTP app (:mod:`workbench.ray.broadcast`),
so its meaning, checks and errors are ``workbench serve``'s. Operations are numbered; each
replica long-polls :meth:`ClusterState.follow` for those after the last it applied, applies
them in order and reports each outcome (:meth:`ClusterState.report`); the replica that took
the request waits in :meth:`ClusterState.outcomes` for the outcome of every replica that was
live when the operation was submitted (a replica that stops polling for ``STALE_S`` is
dropped, and named as not answering when it was expected).

Operations that change state (``replay=True``) are kept in order; a replica registering
(:meth:`ClusterState.register`) gets them all and applies them before it is ready, so a
replica that autoscaling adds serves the models, versions and rollouts the others serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, TypedDict

#: the actor's namespace; its name is ``state_name(app)``
NAMESPACE = "workbench"
#: seconds without a poll after which a replica counts as gone
STALE_S = 10.0


class Op(TypedDict, total=False):
    """One control request: ``method``, ``path`` (with the query), ``headers`` (``[[name,
    value], ...]``, latin-1 text), ``body`` (bytes); ``only`` (a replica id: that replica
    alone applies it) and ``exclude`` (replica ids that skip it)."""

    method: str
    path: str
    headers: list[list[str]]
    body: bytes
    only: str | None
    exclude: list[str]


class Outcome(TypedDict):
    """What one replica answered: HTTP ``status``, ``body`` bytes, ``content_type``."""

    status: int
    body: bytes
    content_type: str


def state_name(app: str) -> str:
    """The actor's name for the Serve application ``app``."""
    return f"workbench-cluster-state:{app}"


class ClusterState:
    """The actor's body (made a Ray actor by :func:`state_actor`); every method is called
    remotely by replicas. Async: Ray runs the calls concurrently on one event loop."""

    def __init__(self) -> None:
        self.seq = 0
        self.ops: dict[int, Op] = {}  # ops some replica has still to apply
        self.log: list[tuple[int, Op]] = []  # state-changing ops, replayed by new replicas
        self.seen: dict[str, float] = {}  # replica id -> time of its last poll (monotonic s)
        self.expected: dict[int, set[str]] = {}
        self.results: dict[int, dict[str, Outcome]] = {}
        self.promoters: dict[str, str] = {}  # model -> the replica that holds its last promote
        self.changed = asyncio.Condition()

    async def register(self, replica: str) -> tuple[int, list[tuple[int, Op]]]:
        """A new replica: ``(seq, log)``, the last operation number and the state-changing
        operations so far (to apply before serving); it follows the operations after ``seq``."""
        self.seen[replica] = time.monotonic()
        return self.seq, [(seq, op) for seq, op in self.log if self._applies(op, replica)]

    async def unregister(self, replica: str) -> None:
        async with self.changed:
            self.seen.pop(replica, None)
            self.changed.notify_all()

    async def beat(self, replica: str) -> None:
        """The replica is live (sent every few seconds, also while it applies a long load)."""
        self.seen[replica] = time.monotonic()

    async def submit(self, op: Op, replay: bool) -> int:
        """Number ``op`` and hand it to the live replicas it applies to; ``replay``: keep it
        for replicas that register later. Returns its number."""
        async with self.changed:
            self.seq += 1
            self.ops[self.seq] = op
            self.expected[self.seq] = {r for r in self._live() if self._applies(op, r)}
            self.results[self.seq] = {}
            if replay:
                self.log.append((self.seq, {**op, "only": None}))
            self.changed.notify_all()
            return self.seq

    async def follow(self, replica: str, after: int, wait_s: float) -> tuple[int, list[tuple[int, Op]]]:
        """The last operation's number and the operations numbered above ``after`` that apply
        to ``replica``, waiting up to ``wait_s`` seconds for a new one (a long poll; each call
        marks the replica live). The caller follows from the number returned next time."""
        self.seen[replica] = time.monotonic()
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: self.seq > after), wait_s)
        self.seen[replica] = time.monotonic()
        return self.seq, [(seq, op) for seq, op in sorted(self.ops.items())
                          if seq > after and replica in self.expected.get(seq, ())]

    async def report(self, seq: int, replica: str, outcome: Outcome) -> None:
        async with self.changed:
            if seq in self.results:
                self.results[seq][replica] = outcome
            self.changed.notify_all()

    async def outcomes(self, seq: int, timeout_s: float) -> tuple[dict[str, Outcome], list[str]]:
        """Wait for every expected replica's outcome of ``seq`` (a replica gone meanwhile is
        no longer waited for). Returns the outcomes and the ids of the replicas that did not
        answer (gone or past ``timeout_s``); forgets the operation."""
        deadline = time.monotonic() + timeout_s
        async with self.changed:
            while True:
                missing = self.expected[seq] - set(self.results[seq])
                if not missing or time.monotonic() > deadline:
                    break
                if not missing & set(self._live()):
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 1.0)
            results = self.results.pop(seq)
            self.expected.pop(seq)
            self.ops.pop(seq, None)
            return results, sorted(missing)

    async def set_promoter(self, model: str, replica: str | None) -> str | None:
        """Record the replica holding ``model``'s last promote (None: forget); returns the
        one recorded before."""
        before = self.promoters.pop(model, None)
        if replica is not None:
            self.promoters[model] = replica
        return before

    async def replicas(self) -> list[str]:
        """The live replicas' ids."""
        return sorted(self._live())

    def _live(self) -> list[str]:
        now = time.monotonic()
        return [r for r, t in self.seen.items() if now - t <= STALE_S]

    @staticmethod
    def _applies(op: Op, replica: str) -> bool:
        only = op.get("only")
        return (only is None or only == replica) and replica not in op.get("exclude", [])


def state_actor(app: str) -> Any:
    """The application's :class:`ClusterState` actor, made when missing (detached: it
    outlives the replica that made it; ``workbench ray-serve`` removes it with the app)."""
    import ray

    actor = ray.remote(num_cpus=0, max_concurrency=1000)(ClusterState)
    return actor.options(name=state_name(app), namespace=NAMESPACE, get_if_exists=True,
                         lifetime="detached").remote()


def remove_state_actor(app: str) -> None:
    """End the application's state actor, if any (a new deployment starts from an empty state)."""
    import ray

    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(state_name(app), namespace=NAMESPACE))
