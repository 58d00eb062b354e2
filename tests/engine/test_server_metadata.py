"""Server metadata (``GET /v2``, gRPC ``ServerMetadata``): Triton's default name and the
extension list of what this server implements, the same over both protocols."""

from __future__ import annotations

from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.hosts.cli import build_parser, options_from_args

#: tritonserver 2.5x's extensions (core server.cc), all implemented here, in Triton's order
TRITON_EXTENSIONS = [
    "classification", "sequence", "model_repository", "model_repository(unload_dependents)",
    "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
    "binary_tensor_data", "parameters", "statistics", "trace", "logging",
]


async def test_http_metadata_has_triton_name_and_extensions(client) -> None:
    meta = (await client.get("/v2")).json()
    assert meta["name"] == "triton"
    assert meta["extensions"] == TRITON_EXTENSIONS


async def test_grpc_metadata_reads_the_same_list(stub_for, server: Server) -> None:
    stub = await stub_for(server)
    metadata = await stub.ServerMetadata(pb.ServerMetadataRequest())
    assert metadata.name == "triton"
    assert list(metadata.extensions) == TRITON_EXTENSIONS


async def test_id_flag_names_the_server(test_repository) -> None:
    args = build_parser().parse_args(
        ["serve", f"--model-repository={test_repository}", "--id=edge-7"])
    options = options_from_args(args)
    assert options.server_id == "edge-7"
    assert ServerOptions().server_id == "triton"
    async with Server(options) as server:
        assert (await server.metadata())["name"] == "edge-7"
