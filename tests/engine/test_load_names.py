"""Names given to the load API: blank ones and ones that could leave the repositories are
refused before anything is read (Triton's texts), over the engine, HTTP and gRPC."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument, Server, ServerOptions

TRAVERSAL = ["../etc", "a/../b", "model/..", "..", " ..", "/etc/passwd", "model/", "."]
BLANK = ["", " ", "\t", " \n "]
#: names with dots that are no traversal: an ordinary "not found"
DOTTED = ["...", "..my_model", "model..1", "model.version1"]


@pytest.fixture
async def explicit(tmp_path: Path, test_repository: Path):
    async with Server(ServerOptions(model_repository=[str(test_repository)],
                                    model_control_mode="explicit")) as server:
        yield server


@pytest.mark.parametrize("name", TRAVERSAL)
async def test_a_name_that_could_leave_the_repository_is_refused(explicit: Server, name: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        await explicit.load_model(name)
    # core ValidateModelName's text, with the name as given (untrimmed)
    assert error.value.message == (f"invalid model name '{name}', model name must not contain "
                                   "path traversal characters")


@pytest.mark.parametrize("name", BLANK)
async def test_a_blank_name_is_refused(explicit: Server, name: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^Model name cannot be empty\. Please enter a valid name to deploy\.$"):
        await explicit.load_model(name)


@pytest.mark.parametrize("name", DOTTED)
async def test_dotted_names_are_only_not_found(explicit: Server, name: str) -> None:
    with pytest.raises(InvalidArgument, match="failed to poll from model repository") as raised:
        await explicit.load_model(name)
    assert "traversal" not in raised.value.message


@pytest.mark.parametrize("name", [*TRAVERSAL, "no_such_model", *DOTTED])
async def test_unloading_a_model_the_server_does_not_know_succeeds(explicit: Server, name: str) -> None:
    """Triton's unload finds nothing to unload for the name and succeeds (no name check;
    upstream L0_lifecycle unloads "unknown_model" and expects no error)."""
    await explicit.unload_model(name)
    assert name not in explicit.lifecycle.models


async def test_the_protocols_answer_400_for_bad_load_names(explicit: Server, asgi_client,
                                                            grpc_stub) -> None:
    async with asgi_client(explicit) as http:
        response = await http.post("/v2/repository/models/%20../load")
        assert response.status_code == 400
        assert "path traversal characters" in response.json()["error"]
        assert (await http.post("/v2/repository/models/no_such_model/unload")).status_code == 200
    async with grpc_stub(explicit) as stub:
        await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="no_such_model"))
        with pytest.raises(grpc.aio.AioRpcError) as blank:
            await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=" "))
        assert blank.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert blank.value.details() == "Model name cannot be empty. Please enter a valid name to deploy."
