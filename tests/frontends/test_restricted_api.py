"""Restricted API groups (tritonserver's --http-restricted-api / --grpc-restricted-protocol) and
the HTTP port's refusal of cross-site browser requests: the real app and grpc server over a real
engine in explicit mode."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server
from workbench.frontends.http.guards import api_group
from workbench.hosts.cli import build_parser, options_from_args
from workbench.startup.restrictions import parse_restrictions
from workbench.testing.attack import CONFIG, load_body, marker_model

KEY = "s3cr3t-key"
RESTRICT = [f"model-repository,shared-memory:admin-key={KEY}", "inference:infer-key=abc"]

def explicit_options(repository: Path, **extra) -> ServerOptions:
    return ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                         load_model=["add_sub"], **extra)


# ----------------------------------------------------------------- parsing
def test_parse_follows_tritons_format_and_texts() -> None:
    parsed = parse_restrictions(["health,metadata:My-Key=v=1"], "http-restricted-api")
    assert {g: (r.header, r.value) for g, r in parsed.items()} == {
        "health": ("my-key", "v=1"), "metadata": ("my-key", "v=1")}
    with pytest.raises(ValueError, match="unknown restricted api 'models'"):
        parse_restrictions(["models:k=v"], "http-restricted-api")
    with pytest.raises(ValueError, match="restricted protocol 'health' can not be specified in "
                                         "multiple config groups"):
        parse_restrictions(["health:k=v", "health:j=w"], "grpc-restricted-protocol", feature="protocol")
    with pytest.raises(ValueError, match="expects <apis>:<key>=<value>"):
        parse_restrictions(["health"], "http-restricted-api")


def test_cli_flags_reach_the_options() -> None:
    args = build_parser().parse_args(["serve", "--model-repository", "m",
                                      "--http-restricted-api=model-repository:k=v",
                                      "--grpc-restricted-protocol=inference,health:k=w"])
    options = options_from_args(args)
    assert options.http_restrictions()["model-repository"].header == "k"
    assert set(options.grpc_restrictions()) == {"inference", "health"}
    assert options.grpc_restrictions()["health"].header == "triton-grpc-protocol-k"


@pytest.mark.parametrize(("path", "group"), [
    ("/v2/health/ready", "health"), ("/v2/models/m/versions/2/ready", "health"),
    ("/v2", "metadata"), ("/v2/models/m", "metadata"), ("/v2/models/m/config", "model-config"),
    ("/v2/models/stats", "statistics"), ("/v2/models/m/versions/1/stats", "statistics"),
    ("/v2/models/m/infer", "inference"), ("/v2/models/m/generate_stream", "inference"),
    ("/v2/repository/index", "model-repository"), ("/v2/repository/models/m/load", "model-repository"),
    ("/v2/systemsharedmemory/region/r/register", "shared-memory"),
    ("/v2/cudasharedmemory/status", "shared-memory"), ("/v2/trace/setting", "trace"),
    ("/v2/models/m/trace/setting", "trace"), ("/v2/logging", "logging"), ("/metrics", None),
])
def test_every_v2_route_has_tritons_group(path: str, group: str | None) -> None:
    assert api_group(path) == group


# ----------------------------------------------------------------- HTTP
async def test_http_restricted_groups_need_their_key(test_repository: Path, asgi_client, tmp_path) -> None:
    marker = tmp_path / "ran"
    async with Server(explicit_options(test_repository, http_restricted_api=RESTRICT)) as server, \
            asgi_client(server) as http:
        refused = await http.post("/v2/repository/models/evil/load", content=load_body(marker))
        assert refused.status_code == 403
        assert refused.json() == {"error": "This API is restricted, expecting header 'admin-key'"}
        wrong = await http.post("/v2/repository/index", headers={"admin-key": "nope"})
        assert wrong.status_code == 403
        shm = await http.get("/v2/systemsharedmemory/status")
        assert shm.json()["error"] == "This API is restricted, expecting header 'admin-key'"
        infer = await http.post("/v2/models/add_sub/infer", json={"inputs": []})
        assert infer.json()["error"] == "This API is restricted, expecting header 'infer-key'"
        # unrestricted groups answer as before
        assert (await http.get("/v2/health/ready")).status_code == 200
        assert (await http.get("/v2/models/add_sub/config")).status_code == 200
        assert not marker.exists()
        assert "evil" not in [row["name"] for row in await server.repository_index()]
        # with the key (header names are case-insensitive), the request is served
        index = await http.post("/v2/repository/index", headers={"Admin-Key": KEY})
        assert index.status_code == 200
        assert "add_sub" in [row["name"] for row in index.json()]


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example", "Content-Type": "text/plain"},    # the exact attack
    {"Origin": "http://evil.example", "Content-Type": "application/json"},
    {"Origin": "null", "Content-Type": "application/json"},
    {"Content-Type": "text/plain;charset=UTF-8"},                        # no Origin: still not JSON
    {"Content-Type": "multipart/form-data; boundary=x"},
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
    {"Sec-Fetch-Mode": "no-cors", "Content-Type": "application/x-www-form-urlencoded"},
    # DNS rebinding: evil.example now resolves to this server; Origin and Host agree
    {"Origin": "http://evil.example:8000", "Host": "evil.example:8000", "Content-Type": "application/json"},
    # ... under .localhost: a name, not this server's address (only 'localhost' itself is)
    {"Origin": "http://evil.localhost:8000", "Host": "evil.localhost:8000", "Content-Type": "application/json"},
    {"Sec-Fetch-Site": "same-origin", "Host": "a.b.localhost", "Content-Type": "application/json"},
])
async def test_cross_site_browser_request_is_refused_and_runs_nothing(
        headers: dict, test_repository: Path, asgi_client, tmp_path) -> None:
    """The attack on `make jupyter`: a web page's "simple" POST loading a Python model that
    runs code. Refused (403) before the body is read, even with no restriction configured."""
    marker = tmp_path / "ran"
    async with Server(explicit_options(test_repository)) as server, asgi_client(server) as http:
        response = await http.post("/v2/repository/models/evil/load", content=load_body(marker),
                                   headers=headers)
        assert response.status_code == 403, response.text
        assert "refused" in response.json()["error"]
        assert not marker.exists()
        assert "evil" not in [row["name"] for row in await server.repository_index()]


async def test_same_origin_and_plain_clients_pass(test_repository: Path, asgi_client) -> None:
    """What real clients send is served: JSON without Origin (tritonclient), curl's and
    libcurl's default form type without browser headers (perf_analyzer's shm registration),
    an Origin naming this server itself."""
    async with Server(explicit_options(test_repository)) as server, asgi_client(server) as http:
        for headers in ({}, {"Content-Type": "application/json"},
                        {"Content-Type": "application/x-www-form-urlencoded"},
                        {"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8000"},
                        {"Host": "localhost:8000", "Sec-Fetch-Site": "same-origin"},
                        {"Host": "[::1]:8000", "Origin": "http://[::1]:8000"},
                        {"Host": "models.internal:8000"}):  # a name is fine without a browser
            response = await http.post("/v2/repository/index", content=b"{}", headers=headers)
            assert response.status_code == 200, (headers, response.text)
        cross_get = await http.get("/v2/models/add_sub/config", headers={"Origin": "http://evil.example"})
        assert cross_get.status_code == 403


# ----------------------------------------------------------------- gRPC
async def test_grpc_restricted_protocols_need_their_key(test_repository: Path, tmp_path) -> None:
    marker = tmp_path / "ran"
    options = ServerOptions(grpc_address="127.0.0.1", grpc_port=0, grpc_restricted_protocol=RESTRICT)
    async with Server(explicit_options(test_repository)) as server:
        grpc_server, port = create_grpc_server(server, options)
        await grpc_server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                model = marker_model(marker)
                load = pb.RepositoryModelLoadRequest(model_name="evil", parameters={
                    "config": pb.ModelRepositoryParameter(string_param=CONFIG),
                    "file:1/model.py": pb.ModelRepositoryParameter(bytes_param=model)})
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.RepositoryModelLoad(load)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                assert refused.value.details() == (
                    "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'")
                with pytest.raises(grpc.aio.AioRpcError) as wrong:
                    await stub.RepositoryIndex(pb.RepositoryIndexRequest(),
                                               metadata=(("triton-grpc-protocol-admin-key", "no"),))
                assert wrong.value.code() == grpc.StatusCode.UNAVAILABLE

                async def one_request():
                    yield pb.ModelInferRequest(model_name="add_sub")

                with pytest.raises(grpc.aio.AioRpcError) as stream:
                    async for _ in stub.ModelStreamInfer(one_request()):
                        pass
                assert stream.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "triton-grpc-protocol-infer-key" in stream.value.details()
                assert (await stub.ServerReady(pb.ServerReadyRequest())).ready
                index = await stub.RepositoryIndex(pb.RepositoryIndexRequest(),
                                                   metadata=(("triton-grpc-protocol-admin-key", KEY),))
                assert "add_sub" in [m.name for m in index.models]
        finally:
            await grpc_server.stop(None)
        assert not marker.exists()
