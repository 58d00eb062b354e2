"""Start-up and model loads as Triton's ``ModelRepositoryManager`` / ``ModelLifeCycle`` do
them (issue 19 item 12): a missing repository with ``--exit-on-error=false`` leaves the
server running but not live and not ready (Triton's SERVER_FAILED_TO_INITIALIZE, whose
metadata still answers); a repository named twice is one repository; a model one of whose
versions fails to load fails as a whole (the versions that did load are unloaded again).

The models are served by the fake backend (the real engine runs around it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument, ModelReadyState, Server, ServerOptions
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, write_backend_model, write_fake_model

pytestmark = pytest.mark.usefixtures("fake_backend")


@pytest.mark.parametrize("strict", [True, False])
async def test_missing_repository_without_exit_on_error_keeps_running_not_live(
    tmp_path: Path, strict: bool, asgi_client, stub_for
) -> None:
    good = tmp_path / "models"
    write_fake_model(good, "fast", count=1)
    missing = tmp_path / "xyzx"
    options = ServerOptions(model_repository=[str(missing), str(good)], exit_on_error=False,
                            strict_readiness=strict)
    async with Server(options) as server:  # start() does not raise
        assert not server.is_live() and not server.is_ready()
        async with asgi_client(server) as http:
            assert (await http.get("/v2/health/live")).status_code == 400
            assert (await http.get("/v2/health/ready")).status_code == 400
            metadata = await http.get("/v2")
            assert metadata.status_code == 200 and metadata.json()["name"] == "triton"
        stub = await stub_for(server)
        assert not (await stub.ServerLive(pb.ServerLiveRequest())).live
        assert not (await stub.ServerReady(pb.ServerReadyRequest())).ready
        assert (await stub.ServerMetadata(pb.ServerMetadataRequest())).name == "triton"
        # Triton creates no model repository manager then: no model loads
        assert not (await stub.ModelReady(pb.ModelReadyRequest(name="fast"))).ready


async def test_missing_repository_with_exit_on_error_fails_start(tmp_path: Path) -> None:
    options = ServerOptions(model_repository=[str(tmp_path / "xyzx")])
    server = Server(options)
    with pytest.raises(InvalidArgument, match="does not exist or is not a directory"):
        await server.start()
    await server.stop()


@pytest.mark.parametrize("mode", ["none", "explicit"])
async def test_the_same_repository_twice_is_one_repository(tmp_path: Path, mode: Literal["none", "explicit"]) -> None:
    write_fake_model(tmp_path, "m", count=1)
    options = ServerOptions(model_repository=[str(tmp_path), str(tmp_path), f"{tmp_path}/"],
                            model_control_mode=mode, load_model=["m"] if mode == "explicit" else [])
    async with Server(options) as server:
        assert server.lifecycle.is_ready("m"), server.lifecycle.entry("m")
        if mode == "explicit":
            await server.load_model("m")  # a reload finds one folder too
            assert server.lifecycle.is_ready("m")
        assert [(r["name"], r.get("state")) for r in await server.repository_index()] == [("m", "READY")]


def _two_versions(repo: Path) -> None:
    config = FAKE_CONFIG.format(name="m", count=2, group="") + "version_policy: { all { } }\n"
    (write_backend_model(repo, "m", config) / "2").mkdir()


async def test_a_version_that_fails_to_load_fails_the_whole_model(tmp_path: Path) -> None:
    _two_versions(tmp_path)
    BEHAVIOUR.fail_versions = {"2"}
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        with pytest.raises(InvalidArgument) as info:
            await server.load_model("m")
        assert info.value.message == (
            "load failed for model 'm': version 2 is at UNAVAILABLE state: "
            "fake load failure of version 2;"
        )
        assert not server.lifecycle.is_ready("m") and not server.lifecycle.is_ready("m", "1")
        assert server.lifecycle.version_states("m") == {
            1: ModelReadyState.UNAVAILABLE, 2: ModelReadyState.UNAVAILABLE
        }
        rows = {r["version"]: r for r in await server.repository_index() if r["name"] == "m"}
        assert rows["1"]["reason"] == "unloaded"
        assert rows["2"]["reason"] == "fake load failure of version 2"
        # version 1's instances were created, then finalized again
        assert BEHAVIOUR.initialized == {"m_0_0": 1, "m_0_1": 1} == BEHAVIOUR.finalized


async def test_a_failed_version_at_start_up_fails_the_whole_model(tmp_path: Path) -> None:
    _two_versions(tmp_path)
    BEHAVIOUR.fail_versions = {"2"}
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        assert server.is_live() and not server.is_ready()  # strict readiness: a model failed
        assert not server.lifecycle.is_ready("m", "1")


async def test_a_folder_without_config_under_strict_config_fails_the_poll_not_readiness(
    tmp_path: Path, asgi_client, caplog: pytest.LogCaptureFixture
) -> None:
    """L0_lifecycle test_parse_error_no_model_config: with ``--strict-model-config=true`` a model
    folder without config.pbtxt fails Triton's poll (its config is read there, before any load):
    the model is left out, unknown to requests ("... is not found"), so the server stays ready
    (strict readiness counts the models it loads), and the log names the file as Triton's
    ReadTextProto does. Before, it was a failed load: server not ready, another text."""
    write_fake_model(tmp_path, "fast", count=1)
    (tmp_path / "noconf" / "1").mkdir(parents=True)
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False, strict_model_config=True)
    with caplog.at_level("ERROR"):
        async with Server(options) as server:
            assert server.is_ready() and server.lifecycle.is_ready("fast")
            assert "noconf" not in server.lifecycle.models
            async with asgi_client(server) as http:
                answer = await http.get("/v2/models/noconf")
                assert answer.json()["error"] == "Request for unknown model: 'noconf' is not found"
    assert (f"Poll failed for model directory 'noconf': failed to open text file for read "
            f"{tmp_path / 'noconf' / 'config.pbtxt'}: No such file or directory") in caplog.text


async def test_a_model_in_no_repository_logs_tritons_poll_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """L0_lifecycle greps a start-up load of a missing model for Triton's poll line ("failed to
    poll model 'm': model not found in any model repository."), logged before the error; an
    explicit load of one logs it too. Before, only the error was logged."""
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        with caplog.at_level("ERROR"), pytest.raises(InvalidArgument) as info:
            await server.load_model("does-not-exist")
    assert info.value.message == "failed to load 'does-not-exist', failed to poll from model repository"
    assert "failed to poll model 'does-not-exist': model not found in any model repository." in caplog.text
