"""Ensembles re-checked when a composing model changes (Triton's dependency graph), on the
real engine with real ONNX models: a reload (load API or poll) whose config no longer fits
an ensemble makes it UNAVAILABLE with Triton's reason; a change that fits again makes it
READY again; an ensemble that failed its check at load serves once its models fit."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from workbench import InferenceRequest, ModelNotFound, Server, ServerOptions, Tensor
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.reload import atomic_write

RENAMED_OUTPUT = (
    "in ensemble ens_chain, ensemble tensor SUM is mapped from non-existing output OUTPUT0 in "
    "model identity16"
)
SMALLER_BATCH = (
    "ensemble ens_chain allows maximum batch size 8, but it contains model identity16 which "
    "only allows maximum batch size to be 4"
)


def renamed_identity() -> bytes:
    """identity16 whose output is called RENAMED instead of OUTPUT0 (ONNX bytes)."""
    dims: list[str | int] = ["batch", 16]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["RENAMED"])], "renamed",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("RENAMED", TensorProto.FLOAT, dims)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def identity_config(output: str = "OUTPUT0", max_batch_size: int = 8) -> dict:
    return {
        "name": "identity16", "backend": "onnxruntime", "max_batch_size": max_batch_size,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": output, "data_type": "TYPE_FP32", "dims": [16]}],
    }


def chain_request(value: float = 1.0) -> InferenceRequest:
    a = np.full((1, 16), value, np.float32)
    return InferenceRequest("ens_chain", [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", a)])


async def rows(server: Server, name: str) -> list[tuple[str, str, str]]:
    return [(r.get("version", ""), r.get("state", ""), r.get("reason", ""))
            for r in await server.repository_index() if r["name"] == name]


async def assert_serves(server: Server) -> None:
    assert await rows(server, "ens_chain") == [("1", "READY", "")]
    response = await server.infer(chain_request(3.0))
    np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 6.0, np.float32))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return build_ensemble_repository(tmp_path / "repo")


# ------------------------------------------------------------------ explicit mode
@pytest.mark.parametrize(("reload", "reason"), [
    ({"config": identity_config("RENAMED"), "files": {"1/model.onnx": renamed_identity()}}, RENAMED_OUTPUT),
    ({"config": identity_config(max_batch_size=4)}, SMALLER_BATCH),
])
async def test_reload_that_no_longer_fits_makes_the_ensemble_unavailable(
    repo: Path, reload: dict, reason: str
) -> None:
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["ens_chain"])
    async with Server(options) as server:
        await assert_serves(server)
        await server.load_model("identity16", **reload)  # the composing model itself loads fine
        assert await rows(server, "identity16") == [("1", "READY", "")]
        assert await rows(server, "ens_chain") == [("1", "UNAVAILABLE", reason)]
        with pytest.raises(ModelNotFound, match="'ens_chain' has no available versions"):
            await server.infer(chain_request())

        # a load without config would keep an override (Triton): the repository's config
        await server.load_model("identity16", config=identity_config())  # fits again
        await assert_serves(server)


async def test_an_ensemble_taken_out_by_a_composing_reload_keeps_the_server_ready(repo: Path) -> None:
    # Triton unloads such an ensemble (state reason "unloaded"), which strict readiness ignores.
    # Model Analyzer loads a composing model's candidate (max batch size 1) before the
    # ensemble's, waiting for /v2/health/ready in between: an unready server stopped it.
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["ens_chain"])
    async with Server(options) as server:
        assert options.strict_readiness and server.is_ready()
        await server.load_model("identity16", config=identity_config(max_batch_size=4))
        assert await rows(server, "ens_chain") == [("1", "UNAVAILABLE", SMALLER_BATCH)]
        assert server.is_ready()


async def test_reload_that_still_fits_keeps_the_same_ensemble_serving(repo: Path) -> None:
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["ens_chain"])
    async with Server(options) as server:
        serving = server.lifecycle.models["ens_chain"].latest_ready
        await server.load_model("identity16", config=identity_config(max_batch_size=16))
        assert server.lifecycle.models["ens_chain"].latest_ready is serving  # not reloaded, not drained
        await assert_serves(server)


# ------------------------------------------------------------------ poll mode
def poll_server(repo: Path) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="poll",
                                repository_poll_secs=0, exit_on_error=False))


async def test_poll_change_that_no_longer_fits_then_fits_again(repo: Path) -> None:
    folder = repo / "identity16"
    original = (folder / "config.pbtxt").read_text()
    original_model = (folder / "1" / "model.onnx").read_bytes()
    async with poll_server(repo) as server:
        await assert_serves(server)
        atomic_write(folder / "config.pbtxt", original.replace('"OUTPUT0"', '"RENAMED"'))
        atomic_write(folder / "1" / "model.onnx", renamed_identity())
        await server.poll_repository()
        assert await rows(server, "identity16") == [("1", "READY", "")]
        assert await rows(server, "ens_chain") == [("1", "UNAVAILABLE", RENAMED_OUTPUT)]

        atomic_write(folder / "config.pbtxt", original.replace("max_batch_size: 8", "max_batch_size: 4"))
        atomic_write(folder / "1" / "model.onnx", original_model)
        await server.poll_repository()  # still does not fit, for another reason now
        assert await rows(server, "ens_chain") == [("1", "UNAVAILABLE", SMALLER_BATCH)]

        atomic_write(folder / "config.pbtxt", original)
        await server.poll_repository()
        await assert_serves(server)


async def test_poll_removed_composing_model_then_restored(repo: Path, tmp_path: Path) -> None:
    async with poll_server(repo) as server:
        shutil.move(repo / "identity16", tmp_path / "identity16")
        await server.poll_repository()
        assert await rows(server, "ens_chain") == [("1", "UNAVAILABLE",
            "ensemble ens_chain contains models that are not available or ambiguous: identity16")]
        shutil.move(tmp_path / "identity16", repo / "identity16")
        await server.poll_repository()
        await assert_serves(server)


async def test_poll_ensemble_that_failed_at_load_serves_once_its_model_is_fixed(repo: Path) -> None:
    folder = repo / "identity16"
    original = (folder / "config.pbtxt").read_text()
    atomic_write(folder / "config.pbtxt", original.replace("max_batch_size: 8", "max_batch_size: 4"))
    async with poll_server(repo) as server:
        assert await rows(server, "ens_chain") == [("", "UNAVAILABLE", SMALLER_BATCH)]
        atomic_write(folder / "config.pbtxt", original)
        await server.poll_repository()  # the ensemble's own folder did not change
        await assert_serves(server)
        assert await rows(server, "ens_nested") == [("1", "READY", "")]  # through ens_diamond

