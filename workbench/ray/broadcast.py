"""Control requests made cluster-wide (docs/ray.md, "Model updates across the cluster").

:class:`ClusterIngress` wraps a replica's v2 HTTP app. A control request it takes from
Serve's proxy is turned into an :class:`~workbench.ray.cluster_state.Op` and applied by every
replica through the :class:`~workbench.ray.cluster_state.ClusterState` actor; the client
gets one answer with the outcome of all:

- ``POST /v2/repository/models/{m}/load`` and ``.../unload``, ``POST`` / ``DELETE
  /v2/models/{m}/rollout``: applied by every replica (and replayed by replicas added later);
- ``POST /v2/models/{m}/rollout/promote``: applied by the replica that took it (it writes the
  model's config file in the shared repository and reloads), then every other replica
  reloads the model and clears its rollout;
- ``POST /v2/models/{m}/rollout/rollback``: applied by the replica that holds the promote,
  then every other replica reloads the model and sets the rollout the rollback restored;
- ``GET /v2/cluster/replicas`` (a product extension): each replica's id and its
  ``/v2/models/stats``, ``{"replicas": [{"replica", "status", "stats"}]}``.

All replicas answered 2xx: the first replica's answer (by id), with the header
``workbench-replicas: N``. Any failed: ``{"error": "replica ID: message; ..."}`` with the
status of the first failure (a replica that did not answer in time: 503). Everything else
goes to the replica's app as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import orjson

from workbench.ray.cluster_state import Op, Outcome

log = logging.getLogger("workbench")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]

#: seconds the replica that took a control request waits for every replica's outcome
OUTCOME_TIMEOUT_S = 600.0
REPLICATED = re.compile(r"^/v2/(repository/models/[^/]+/(load|unload)|models/[^/]+/rollout)$")
PROMOTE = re.compile(r"^/v2/models/([^/]+)/rollout/(promote|rollback)$")
REPLICAS_PATH = "/v2/cluster/replicas"


async def apply(app: ASGIApp, op: Op) -> Outcome:
    """``op`` sent to ``app`` (the replica's own v2 app) in-process; its answer."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as client:
        response = await client.request(op["method"], op["path"], headers=[(k, v) for k, v in op["headers"]],
                                        content=op["body"])
    return {"status": response.status_code, "body": response.content,
            "content_type": response.headers.get("content-type", "")}


async def replay(app: ASGIApp, state: Any, replica: str) -> tuple[int, int]:
    """Register ``replica`` with the cluster state and apply the state-changing operations
    so far to ``app`` (a replica starting: before it serves). Returns the last operation's
    number (to follow from) and how many were applied."""
    applied, kept = await state.register.remote(replica)
    for _, op in kept:
        outcome = await apply(app, op)
        if outcome["status"] >= 400:
            log.warning("replica %s: replaying %s %s: HTTP %d %r", replica, op["method"], op["path"],
                        outcome["status"], outcome["body"][:500])
    return applied, len(kept)


async def follow(app: ASGIApp, state: Any, replica: str, applied: int, wait_s: float = 2.0) -> None:
    """Apply the cluster's operations after number ``applied`` to ``app`` in order, reporting
    each outcome; runs until cancelled (a failing state actor: polled again a second later)."""
    while True:
        try:
            last, ops = await state.follow.remote(replica, applied, wait_s)
            for seq, op in ops:
                outcome = await apply(app, op)
                await state.report.remote(seq, replica, outcome)
            applied = last  # those of other replicas skipped too
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replica %s: following the cluster state", replica)
            await asyncio.sleep(1.0)


async def beat(state: Any, replica: str, every_s: float = 2.0) -> None:
    """Tell the cluster state ``replica`` is live every ``every_s`` (until cancelled)."""
    while True:
        with contextlib.suppress(Exception):
            await state.beat.remote(replica)
        await asyncio.sleep(every_s)


def error_text(outcome: Outcome) -> str:
    """The ``error`` of a v2 error body, or the body as text."""
    try:
        return str(orjson.loads(outcome["body"])["error"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return outcome["body"].decode(errors="replace") or f"HTTP {outcome['status']}"


def combined(results: dict[str, Outcome], missing: list[str]) -> Outcome:
    """One answer for the outcomes of all replicas (module docstring)."""
    failed = [(r, o) for r, o in sorted(results.items()) if o["status"] >= 400]
    if failed or missing or not results:
        parts = [f"replica {r}: {error_text(o)}" for r, o in failed]
        parts += [f"replica {r}: no answer" for r in missing]
        status = failed[0][1]["status"] if failed else 503
        return {"status": status, "body": orjson.dumps({"error": "; ".join(parts) or "no replica answered"}),
                "content_type": "application/json"}
    return next(o for _, o in sorted(results.items()))


class ClusterIngress:
    """The ASGI app of a replica at Serve's proxy: control requests made cluster-wide
    (module docstring), the rest to ``app``.

    Args:
        app: the replica's v2 HTTP app (``create_app(server)``).
        state: the :class:`~workbench.ray.cluster_state.ClusterState` actor handle.
        replica: this replica's id.
    """

    def __init__(self, app: ASGIApp, state: Any, replica: str) -> None:
        self.app = app
        self.state = state
        self.replica = replica

    async def __call__(self, scope: Scope, receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[Any]]) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        method = scope.get("method", "")
        if method in ("POST", "DELETE") and REPLICATED.match(path):
            op = await self._op(scope, receive)
            outcome = await self._everywhere(op, replay=True)
        elif method == "POST" and (match := PROMOTE.match(path)):
            op = await self._op(scope, receive)
            outcome = await self._promote(op, match.group(1), match.group(2))
        elif method == "GET" and path == REPLICAS_PATH:
            outcome = await self._replicas(await self._op(scope, receive))
        else:
            await self.app(scope, receive, send)
            return
        await send_outcome(outcome, send)

    async def _op(self, scope: Scope, receive: Callable[..., Awaitable[Any]]) -> Op:
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope.get("query_string", b"").decode("latin-1")
        return {"method": scope["method"], "path": scope["path"] + (f"?{query}" if query else ""),
                "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]
                            if k.lower() not in (b"content-length", b"host", b"transfer-encoding")],
                "body": bytes(body), "only": None, "exclude": []}

    async def _submit(self, op: Op, replay: bool) -> tuple[dict[str, Outcome], list[str]]:
        seq = await self.state.submit.remote(op, replay)
        result: tuple[dict[str, Outcome], list[str]] = await self.state.outcomes.remote(seq, OUTCOME_TIMEOUT_S)
        return result

    async def _everywhere(self, op: Op, replay: bool) -> Outcome:
        return combined(*await self._submit(op, replay))

    async def _promote(self, op: Op, model: str, action: str) -> Outcome:
        """Promote on this replica, rollback on the promoting one; then the others follow."""
        leader = self.replica
        if action == "rollback":  # the replica holding the promote (none known: this one, which says so)
            leader = await self.state.set_promoter.remote(model, None) or self.replica
        results, missing = await self._submit({**op, "only": leader}, replay=False)
        first = combined(results, missing)
        if first["status"] >= 400:
            if action == "rollback" and leader != self.replica:
                await self.state.set_promoter.remote(model, leader)
            return first
        body = orjson.loads(first["body"])
        base: Op = {"method": "POST", "headers": [["content-type", "application/json"]], "body": b"{}",
                    "only": None, "exclude": [leader]}
        follow: list[Op] = [{**base, "path": f"/v2/repository/models/{model}/load"}]
        restored = body.get("restored") if action == "rollback" else None
        if restored:
            follow.append({**base, "path": f"/v2/models/{model}/rollout", "body": orjson.dumps(restored)})
        else:
            follow.append({**base, "method": "DELETE", "path": f"/v2/models/{model}/rollout", "body": b""})
        if action == "promote":
            await self.state.set_promoter.remote(model, leader)
        for step in follow:
            outcome = await self._everywhere(step, replay=True)
            if outcome["status"] >= 400:
                return outcome
        return first

    async def _replicas(self, op: Op) -> Outcome:
        query: Op = {**op, "method": "GET", "path": "/v2/models/stats"}
        results, missing = await self._submit(query, replay=False)
        rows: list[dict[str, Any]] = []
        for replica, outcome in sorted(results.items()):
            stats = orjson.loads(outcome["body"]) if outcome["status"] == 200 else {"error": error_text(outcome)}
            rows.append({"replica": replica, "status": outcome["status"], "stats": stats})
        rows += [{"replica": r, "status": 503, "stats": {"error": "no answer"}} for r in missing]
        return {"status": 200, "body": orjson.dumps({"replicas": rows}), "content_type": "application/json"}


async def send_outcome(outcome: Outcome, send: Callable[..., Awaitable[Any]]) -> None:
    headers = [(b"content-length", str(len(outcome["body"])).encode())]
    if outcome["content_type"]:
        headers.append((b"content-type", outcome["content_type"].encode("latin-1")))
    await send({"type": "http.response.start", "status": outcome["status"], "headers": headers})
    await send({"type": "http.response.body", "body": outcome["body"]})
