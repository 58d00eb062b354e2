"""The rollout extension over HTTP (a product extension: Triton has none; ``docs/rollouts.md``).

- ``GET    /v2/models/{m}/rollout`` -> the rollout and its live report (``server.rollouts.get``)
- ``POST   /v2/models/{m}/rollout`` body ``{"weights": {"1": 90, "2": 10}, "sticky"?,
  "candidate"?, "mirror_percent"?, "mirror_max_in_flight"?}`` -> set or replace it; the report
- ``DELETE /v2/models/{m}/rollout`` -> clear it (200, empty)
- ``POST   /v2/models/{m}/rollout/promote`` body ``{"version"?}`` (default: the candidate)
- ``POST   /v2/models/{m}/rollout/rollback``

They belong to the ``model-repository`` restricted group (``--http-restricted-api``, as the
repository routes that load and unload: promote and rollback rewrite and reload a model).
Errors are ``{"error": ...}`` with the status of the engine's error (400 for a bad rollout or
an unknown body field, 404 for an unknown model or nothing to roll back). The same API over
gRPC is :mod:`workbench.frontends.grpc.rollouts`.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request, Response

from workbench import Server
from workbench.frontends.http.body_limits import route_json
from workbench.frontends.rollout_body import PROMOTE_FIELDS, ROLLOUT_FIELDS, checked_fields


def rollout_routes(server: Server) -> APIRouter:
    """The rollout routes over ``server.rollouts``."""
    router = APIRouter()
    base = "/v2/models/{model}/rollout"

    @router.get(base)
    async def get_rollout(model: str) -> Response:
        return json_response(await server.rollouts.get(model))

    @router.post(base)
    async def set_rollout(request: Request, model: str) -> Response:
        body = checked_fields(await route_json(request), ROLLOUT_FIELDS)
        return json_response(await server.rollouts.set(model, **body))

    @router.delete(base)
    async def clear_rollout(model: str) -> Response:
        await server.rollouts.clear(model)
        return Response(status_code=200)

    @router.post(f"{base}/promote")
    async def promote(request: Request, model: str) -> Response:
        body = checked_fields(await route_json(request), PROMOTE_FIELDS)
        return json_response(await server.rollouts.promote(model, body.get("version")))

    @router.post(f"{base}/rollback")
    async def rollback(model: str) -> Response:
        return json_response(await server.rollouts.rollback(model))

    return router


def json_response(payload: object) -> Response:
    return Response(orjson.dumps(payload), status_code=200, media_type="application/json")


__all__ = ["rollout_routes"]
