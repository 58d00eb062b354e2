"""Triton's shared-memory extensions over HTTP (``extension_shared_memory.md``).

- ``GET  /v2/systemsharedmemory[/region/{name}]/status`` -> ``[{"name", "key", "offset", "byte_size"}]``
- ``POST /v2/systemsharedmemory/region/{name}/register`` body ``{"key", "offset"?, "byte_size"}``
- ``POST /v2/systemsharedmemory[/region/{name}]/unregister`` (no name = all)
- the same under ``/v2/cudasharedmemory``: status rows ``{"name", "device_id", "byte_size"}``,
  register body ``{"raw_handle": {"b64": "<base64 cudaIpcMemHandle_t>"}, "device_id", "byte_size"}``

Success answers 200 (status with the JSON array); errors ``{"error": ...}`` as everywhere.
"""

from __future__ import annotations

import base64
import binascii

import orjson
from fastapi import APIRouter, Request, Response

from workbench import InvalidArgument, Server
from workbench.frontends.http.body_limits import route_json

JSON = "application/json"


def shared_memory_routes(server: Server) -> APIRouter:
    """The system and CUDA shared-memory routes over ``server``'s registry."""
    router = APIRouter()
    system, cuda = "/v2/systemsharedmemory", "/v2/cudasharedmemory"

    @router.post(f"{system}/register")
    @router.post(f"{system}/region/{{name}}/register")
    async def system_register(request: Request, name: str = "") -> Response:
        body = await _register_body(request, name, "system")
        key = body.get("key")
        if key is None:
            raise InvalidArgument("Shared memory register request has no 'key' field")
        if not isinstance(key, str):
            raise InvalidArgument("Unable to parse 'key'")
        offset = _uint(body.get("offset", 0), "offset")
        byte_size = _uint(_required(body, "byte_size"), "byte_size")
        await server.shared_memory.register_system_shared_memory(name, key, offset, byte_size)
        return Response(status_code=200)

    @router.post(f"{cuda}/register")
    @router.post(f"{cuda}/region/{{name}}/register")
    async def cuda_register(request: Request, name: str = "") -> Response:
        body = await _register_body(request, name, "cuda")
        raw = _required(body, "raw_handle")
        encoded = raw.get("b64") if isinstance(raw, dict) else None
        if not isinstance(encoded, str):
            raise InvalidArgument("Unable to parse 'raw_handle': expected {\"b64\": \"<base64>\"}")
        try:
            handle = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t") from None
        device_id = _uint(_required(body, "device_id"), "device_id")
        byte_size = _uint(_required(body, "byte_size"), "byte_size")
        await server.shared_memory.register_cuda_shared_memory(name, handle, device_id, byte_size)
        return Response(status_code=200)

    shm = server.shared_memory
    _status_and_unregister(router, system, shm.system_shared_memory_status, shm.unregister_system_shared_memory)
    _status_and_unregister(router, cuda, shm.cuda_shared_memory_status, shm.unregister_cuda_shared_memory)
    return router


def _status_and_unregister(router: APIRouter, prefix: str, status, unregister) -> None:
    """``GET {prefix}[/region/{name}]/status`` and ``POST {prefix}[/region/{name}]/unregister``."""

    async def status_route(name: str = "") -> Response:
        return _json(await status(name))

    async def unregister_route(name: str = "") -> Response:
        await unregister(name)
        return Response(status_code=200)

    for path in (prefix, f"{prefix}/region/{{name}}"):
        router.add_api_route(f"{path}/status", status_route, methods=["GET"])
        router.add_api_route(f"{path}/unregister", unregister_route, methods=["POST"])


async def _register_body(request: Request, name: str, kind: str) -> dict:
    if not name:
        raise InvalidArgument(f"'region name' is necessary to register {kind} shared memory region")
    return await route_json(request)


def _required(body: dict, field: str) -> object:
    if field not in body:
        raise InvalidArgument(f"Shared memory register request has no '{field}' field")
    return body[field]


def _uint(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"Unable to parse '{field}': expected an unsigned integer")
    return value


def _json(payload: object) -> Response:
    return Response(orjson.dumps(payload), status_code=200, media_type=JSON)
