"""``create_app(server)``: the KServe v2 REST API and Triton's extensions over one engine.

Routes are thin: decode -> one ``Server`` call -> encode. Every error is answered by the one
error boundary (:mod:`workbench.frontends.error_boundary`): ``{"error": "<message>"}`` with
Triton's HTTP status.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re

import orjson
from fastapi import APIRouter, FastAPI, Request, Response

from workbench import InvalidArgument, Server, Unsupported, model_config_to_json
from workbench.frontends.error_boundary import HttpErrorBoundary, http_exception_handlers
from workbench.frontends.http.body_limits import BodyLimits, route_body, route_json
from workbench.frontends.http.codec import parse_json_object
from workbench.frontends.http.generate import GeneratePath
from workbench.frontends.http.guards import RequestGuard
from workbench.frontends.http.infer_asgi import InferFastPath
from workbench.frontends.http.rollout_routes import rollout_routes
from workbench.frontends.http.shared_memory_routes import shared_memory_routes
from workbench.frontends.openai import openai_routes

log = logging.getLogger(__name__)

JSON = "application/json"


def json_response(payload: object, status: int = 200) -> Response:
    """A JSON response serialized with orjson."""
    return Response(orjson.dumps(payload), status_code=status, media_type=JSON)


def create_app(server: Server) -> RequestGuard:
    """Build the ASGI application serving ``server`` over the v2 protocol.

    :class:`RequestGuard` comes first (cross-site browser requests, non-JSON POST bodies and
    restricted API groups without their key get 403 before anything else runs); infer
    requests are then served by :class:`InferFastPath` (the hot path: checked first), generate
    requests by :class:`GeneratePath`, everything else by a FastAPI app behind
    :class:`BodyLimits` (each route's body bounded, refused before it is read on).
    The app does not start or stop the engine: its host does.
    """
    app = FastAPI(title="Model Serving Workbench", docs_url=None, redoc_url=None, openapi_url=None,
                  exception_handlers=http_exception_handlers())
    app.add_middleware(HttpErrorBoundary)  # any other exception: 500 in Triton's shape
    app.state.server = server

    app.include_router(_health_routes(server))
    app.include_router(_model_routes(server))
    app.include_router(_repository_routes(server))
    app.include_router(shared_memory_routes(server))
    app.include_router(rollout_routes(server))
    app.include_router(_settings_routes(server))
    app.include_router(openai_routes(server))  # /v1: OpenAI-compatible (docs/openai.md)
    options = server.options
    bounded = BodyLimits(app, options.http_max_input_size, options.http_max_control_body_size)
    routes = InferFastPath(server, GeneratePath(server, bounded))  # infer, the hot path, first
    return RequestGuard(routes, server.options.http_restrictions())


def _health_routes(server: Server) -> APIRouter:
    router = APIRouter()

    @router.get("/v2/health/live")
    async def live() -> Response:
        return Response(status_code=200 if server.is_live() else 400)

    @router.get("/v2/health/ready")
    async def ready() -> Response:
        return Response(status_code=200 if server.is_ready() else 400)

    @router.get("/v2")
    async def metadata() -> Response:
        return json_response(await server.metadata())

    return router


def _model_routes(server: Server) -> APIRouter:
    router = APIRouter()

    @router.get("/v2/models/stats")
    async def all_stats() -> Response:
        return json_response(await server.statistics())

    @router.get("/v2/models/{model}")
    @router.get("/v2/models/{model}/versions/{version}")
    async def model_metadata(model: str, version: str = "") -> Response:
        return json_response(await server.model_metadata(model, version))

    @router.get("/v2/models/{model}/ready")
    @router.get("/v2/models/{model}/versions/{version}/ready")
    async def model_ready(model: str, version: str = "") -> Response:
        if await server.model_ready(model, version):
            return Response(status_code=200)
        raise InvalidArgument("Model version not ready")  # Triton's 400 and text

    @router.get("/v2/models/{model}/config")
    @router.get("/v2/models/{model}/versions/{version}/config")
    async def model_config(model: str, version: str = "") -> Response:
        return json_response(model_config_to_json(await server.model_config(model, version)))

    @router.get("/v2/models/{model}/stats")
    @router.get("/v2/models/{model}/versions/{version}/stats")
    async def model_stats(model: str, version: str = "") -> Response:
        return json_response(await server.statistics(model, version))

    return router


#: a body whose ``ready`` member is an array or object (read when the body is too deep to parse)
_READY_CONTAINER = re.compile(rb'^\s*\{\s*"ready"\s*:\s*[\[{]')


def _repository_routes(server: Server) -> APIRouter:
    router = APIRouter()

    @router.post("/v2/repository/index")
    async def index(request: Request) -> Response:
        """Every model with its versions' states; ``{"ready": true}`` keeps the ready ones.

        Raises:
            InvalidArgument: ``ready`` is not a JSON boolean ("Invalid value for 'ready':
                expected a boolean", Triton's text).
        """
        body = await route_body(request)
        try:
            ready = (parse_json_object(body) if body.strip() else {}).get("ready", False)
        except InvalidArgument:
            # too deeply nested to parse (orjson stops at 1024 levels, without recursing
            # out); Triton parses it and refuses a 'ready' that is an array or object
            if _READY_CONTAINER.search(body[:4096]):
                raise InvalidArgument("Invalid value for 'ready': expected a boolean") from None
            raise
        if not isinstance(ready, bool):
            raise InvalidArgument("Invalid value for 'ready': expected a boolean")
        return json_response(await server.repository_index(ready=ready))

    @router.post("/v2/repository/models/{model}/load")
    async def load(request: Request, model: str) -> Response:
        """Load (explicit mode): ``config`` (a JSON string) and ``file:<path>`` parameters
        (base64-encoded file contents, Triton's repository extension). The body is bounded
        by ``--http-max-input-size``, as Triton's (:class:`BodyLimits`)."""
        params = _parameters(await route_json(request))
        config = params.get("config")
        if config is not None and not isinstance(config, str):
            raise InvalidArgument("Config parameter 'config' must have string type for its value")
        encoded = {k: v for k, v in params.items() if k.startswith(FILE_PREFIX)}
        files = await asyncio.to_thread(_decode_files, encoded) if encoded else None
        await server.load_model(model, config, files)
        return Response(status_code=200)

    @router.post("/v2/repository/models/{model}/unload")
    async def unload(request: Request, model: str) -> Response:
        dependents = _parameters(await route_json(request)).get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("Unable to parse 'unload_dependents': attempt to access JSON "
                                  "non-boolean as boolean")
        await server.unload_model(model, dependents)
        return Response(status_code=200)

    @router.api_route("/v2/repository/{repository}/{rest:path}", methods=["GET", "POST"])
    async def named_repository(repository: str, rest: str) -> Response:
        raise Unsupported("'repository_name' specification is not supported")  # 501, Triton's

    return router


def _settings_routes(server: Server) -> APIRouter:
    """Triton's logging and trace extensions: GET reports, POST updates then reports."""
    router = APIRouter()

    @router.get("/v2/logging")
    async def get_logging() -> Response:
        return json_response(await server.settings.log_settings())

    @router.post("/v2/logging")
    async def update_logging(request: Request) -> Response:
        return json_response(await server.settings.update_log_settings(await route_json(request)))

    @router.get("/v2/trace/setting")
    @router.get("/v2/models/{model}/trace/setting")
    async def get_trace(model: str | None = None) -> Response:
        return json_response(await server.settings.trace_settings(model))

    @router.post("/v2/trace/setting")
    @router.post("/v2/models/{model}/trace/setting")
    async def update_trace(request: Request, model: str | None = None) -> Response:
        return json_response(await server.settings.update_trace_settings(await route_json(request), model))

    return router


#: the load parameter prefix of a model file override
FILE_PREFIX = "file:"


def _decode_files(encoded: dict[str, object]) -> dict[str, bytes]:
    """``{"file:<path>": base64 string}`` -> ``{"<path>": bytes}`` (the engine's form).

    Decoding is lenient about characters outside the base64 alphabet (line breaks), as
    Triton's decoder is.

    Raises:
        InvalidArgument: a value is not a string, or not base64.
    """
    files = {}
    for key, value in encoded.items():
        if not isinstance(value, str):
            raise InvalidArgument(f"File parameter '{key}' must have a base64-encoded string "
                                  "for its value")
        try:
            files[key[len(FILE_PREFIX):]] = base64.b64decode(value)
        except (binascii.Error, ValueError) as exc:
            raise InvalidArgument(f"Unable to decode file parameter '{key}' as base64: {exc}") from None
    return files


def _parameters(body: dict) -> dict:
    """A repository request's ``parameters`` object ({} when absent).

    Raises:
        InvalidArgument: ``parameters`` is not a JSON object.
    """
    params = body.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidArgument("Unable to parse 'parameters': attempt to access JSON non-object as object")
    return params
