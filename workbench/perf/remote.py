"""Remote targets: a v2 server over HTTP or gRPC, through tritonclient's asyncio clients.

``-u localhost:8000 -i http`` / ``-u localhost:8001 -i grpc``, as perf_analyzer. Inputs go
as binary tensors (HTTP's binary extension, gRPC's raw contents) and every output comes
back binary, perf_analyzer's default tensor formats. tritonclient is imported when a
client is made, so importing :mod:`workbench.perf` stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from workbench import Tensor
from workbench.perf.errors import PerfError

Protocol = Literal["http", "grpc"]
#: perf_analyzer's default URLs
DEFAULT_URLS = {"http": "localhost:8000", "grpc": "localhost:8001"}


class _TritonAioClient:
    """What the HTTP and gRPC clients share: building tritonclient ``InferInput`` objects
    from :class:`Tensor` data once per request (``prepare``), sending them, closing."""

    _module: Any  # tritonclient.http or tritonclient.grpc (their InferInput); untyped
    _client: Any  # the matching asyncio InferenceServerClient (tritonclient ships no types)

    def _set_data(self, infer_input: Any, tensor: Tensor) -> None:
        infer_input.set_data_from_numpy(tensor.data)

    def prepare(self, model: str, version: str, inputs: Sequence[Tensor]) -> object:
        wire = []
        for tensor in inputs:
            infer_input = self._module.InferInput(
                tensor.name, list(tensor.shape), tensor.datatype)
            self._set_data(infer_input, tensor)
            wire.append(infer_input)
        return (model, version, wire)

    async def infer(self, request: object) -> None:
        model, version, wire = cast("tuple[str, str, list[Any]]", request)  # what prepare() made
        await self._client.infer(model, wire, model_version=version)

    async def close(self) -> None:
        await self._client.close()


class HttpClient(_TritonAioClient):
    """A :class:`workbench.perf.PerfClient` over ``tritonclient.http.aio``.

    Args:
        url: ``host:port`` without scheme (tritonclient's form).

    The connection pool has no limit: the load itself bounds the connections (one per
    request in flight, as perf_analyzer's one per context), and a pool limit would only
    queue requests in the client, where they would count as latency. (A pool at its limit
    can also leave a waiter asleep beside idle connections: aiohttp 3.14 hung here with
    the limit at the concurrency.)
    """

    kind = "http"

    def __init__(self, url: str) -> None:
        import tritonclient.http as http
        import tritonclient.http.aio as aio

        self._module = http
        self._client = aio.InferenceServerClient(url, conn_limit=0)  # 0: aiohttp's "no limit"

    async def model_metadata(self, model: str, version: str) -> dict:
        return await self._client.get_model_metadata(model, version)

    async def model_config(self, model: str, version: str) -> dict:
        return await self._client.get_model_config(model, version)

    async def statistics(self, model: str, version: str) -> dict:
        return await self._client.get_inference_statistics(model, version)

    def _set_data(self, infer_input: Any, tensor: Tensor) -> None:
        infer_input.set_data_from_numpy(tensor.data, binary_data=True)


class GrpcClient(_TritonAioClient):
    """A :class:`workbench.perf.PerfClient` over ``tritonclient.grpc.aio`` (one channel;
    HTTP/2 multiplexes the concurrent requests)."""

    kind = "grpc"

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpc
        import tritonclient.grpc.aio as aio

        self._module = grpc
        self._client = aio.InferenceServerClient(url)

    async def model_metadata(self, model: str, version: str) -> dict:
        return await self._client.get_model_metadata(model, version, as_json=True)

    async def model_config(self, model: str, version: str) -> dict:
        return await self._client.get_model_config(model, version, as_json=True)

    async def statistics(self, model: str, version: str) -> dict:
        return await self._client.get_inference_statistics(model, version, as_json=True)



def remote_client(url: str | None = None, protocol: Protocol = "http") -> HttpClient | GrpcClient:
    """A client for the server at ``url`` (default: perf_analyzer's, port 8000 or 8001).

    Raises:
        PerfError: an unknown protocol or a URL with a scheme (tritonclient takes
            ``host:port[/path]``).
    """
    if protocol not in DEFAULT_URLS:
        raise PerfError(f"unknown protocol '{protocol}' (expected http or grpc)")
    url = url or DEFAULT_URLS[protocol]
    if "://" in url:
        raise PerfError(f"url '{url}' should not include the scheme (use host:port)")
    if protocol == "http":
        return HttpClient(url)
    return GrpcClient(url)
