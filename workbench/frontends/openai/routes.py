"""The ``/v1`` router: models, load / unload, embeddings, completions (the package docstring).

``GET /v1/models`` lists the models with a READY version, in OpenAI's list shape
(``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``);
``created`` is when this frontend first saw the model ready (seconds since the epoch).
``POST /v1/models/{m}/load`` and ``/unload`` are Triton 2.68's: explicit mode only (400
"Model load/unload requires --model-control-mode=explicit"), load answers the model object
(400 "Model '<m>' is already loaded" when it is), unload ``{"status": "success", "model": m}``
(400 "Unknown model: <m>" when it is not loaded). Any other ``/v1`` path or method answers
404 "Invalid URL (<METHOD> <path>)" (OpenAI's text).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from workbench import Server
from workbench.frontends.http.body_limits import route_body
from workbench.frontends.openai.completions import prepare
from workbench.frontends.openai.embeddings import create_embeddings
from workbench.frontends.openai.errors import OpenAIError, OpenAIRoute, unknown_model
from workbench.frontends.openai.requests import parse_body
from workbench.frontends.openai.tokens import TokenCounters

#: ``owned_by`` of every model (Triton's OpenAI frontend's)
OWNED_BY = "Triton Inference Server"
EXPLICIT_ONLY = "Model load/unload requires --model-control-mode=explicit"
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json")


class _Seen:
    """When each model was first seen ready (OpenAI's ``created``, seconds)."""

    def __init__(self) -> None:
        self.created: dict[str, int] = {}

    def model(self, name: str) -> dict[str, Any]:
        created = self.created.setdefault(name, int(time.time()))
        return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}


def _ready_names(server: Server) -> list[str]:
    return sorted({name for name, _, ready in server.model_readiness() if ready})


def openai_routes(server: Server) -> APIRouter:
    """The ``/v1`` routes over ``server`` (errors in OpenAI's shape: :class:`OpenAIRoute`)."""
    router = APIRouter(route_class=OpenAIRoute)
    seen = _Seen()
    counters = TokenCounters(server)

    @router.get("/v1/models")
    async def list_models() -> Response:
        return _json({"object": "list", "data": [seen.model(n) for n in _ready_names(server)]})

    @router.get("/v1/models/{model}")
    async def retrieve_model(model: str) -> Response:
        if model not in _ready_names(server):
            raise unknown_model(model, 404)
        return _json(seen.model(model))

    @router.post("/v1/models/{model}/load")
    async def load_model(model: str) -> Response:
        if server.options.model_control_mode != "explicit":
            raise OpenAIError(EXPLICIT_ONLY)
        if model in _ready_names(server):
            raise OpenAIError(f"Model '{model}' is already loaded", param="model")
        await server.load_model(model)
        seen.created.pop(model, None)
        return _json(seen.model(model))

    @router.post("/v1/models/{model}/unload")
    async def unload_model(model: str) -> Response:
        if server.options.model_control_mode != "explicit":
            raise OpenAIError(EXPLICIT_ONLY)
        if model not in _ready_names(server):
            raise unknown_model(model)
        await server.unload_model(model)
        seen.created.pop(model, None)
        return _json({"status": "success", "model": model})

    @router.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        return _json(await create_embeddings(server, counters, parse_body(await route_body(request))))

    async def completion(request: Request, chat: bool) -> Response:
        run = await prepare(server, counters, parse_body(await route_body(request)), chat)
        if not run.job.stream:
            return _json(await run.answer())
        pieces, first = await run.first_piece()
        return StreamingResponse(run.events(pieces, first), media_type="text/event-stream",
                                 headers=_SSE_HEADERS)

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await completion(request, chat=False)

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await completion(request, chat=True)

    @router.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown_route(request: Request, rest: str) -> Response:
        """Any other ``/v1`` path or method: 404 in OpenAI's shape and text."""
        raise OpenAIError(f"Invalid URL ({request.method} /v1/{rest})", 404)

    return router


__all__ = ["EXPLICIT_ONLY", "OWNED_BY", "openai_routes"]
