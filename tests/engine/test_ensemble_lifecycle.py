"""Ensemble lifecycle on the real engine: validation at load (UNAVAILABLE with Triton's
reasons while the other models serve), load order, explicit load of composing models,
unload_dependents, composing models unloaded or reloaded under an ensemble, shutdown."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from workbench import (
    InferenceRequest,
    InvalidArgument,
    ModelLoadError,
    ModelNotFound,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.backends.registry import register_backend
from workbench.testing.ensembles import (
    BROKEN_ENSEMBLE_REASONS,
    add_broken_ensembles,
    build_ensemble_repository,
    build_fake_ensemble_repository,
)
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend


@pytest.fixture(scope="module")
def ensemble_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble_repository(tmp_path_factory.mktemp("ensembles"))


@pytest.fixture(scope="module")
def broken_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_broken_ensembles(build_ensemble_repository(tmp_path_factory.mktemp("broken")))


def explicit(repo: Path, *load: str) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                                load_model=list(load)))


def pair(name: str, value: float = 1.0) -> InferenceRequest:
    a = np.full((1, 16), value, np.float32)
    return InferenceRequest(name, [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", a)])


async def states(server: Server) -> dict[str, tuple[str, str]]:
    return {r["name"]: (r.get("state", ""), r.get("reason", "")) for r in await server.repository_index()}


async def test_invalid_ensembles_are_unavailable_with_their_reason(broken_repository: Path, asgi_client) -> None:
    options = ServerOptions(model_repository=[str(broken_repository)], exit_on_error=False)
    async with Server(options) as server:
        index = await states(server)
        for name, expected in BROKEN_ENSEMBLE_REASONS.items():
            state, reason = index[name]
            assert state == "UNAVAILABLE", name
            if expected.endswith(": "):  # ends with the backend's own error text
                assert reason.startswith(expected), name
            else:
                assert reason == expected, name
        with pytest.raises(ModelNotFound, match=r"^Request for unknown model: 'bad_batch' has no available versions$"):
            await server.infer(pair("bad_batch"))
        for name in ("ens_chain", "ens_nested", "add_sub"):
            assert index[name] == ("READY", "")
        response = await server.infer(pair("ens_nested", 2.0))
        np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 8.0, np.float32))
        assert not server.is_ready()  # strict readiness: a model failed to load
        async with asgi_client(server) as http:
            rows = (await http.post("/v2/repository/index")).json()
            for name in ("bad_version", "bad_unused_input", "bad_unproduced_output", "bad_shape"):
                row = next(r for r in rows if r["name"] == name)
                assert row == {"name": name, "state": "UNAVAILABLE", "reason": BROKEN_ENSEMBLE_REASONS[name]}


async def test_exit_on_error_names_the_ensemble_reason(broken_repository: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"'bad_batch': ensemble bad_batch allows maximum batch size 16"):
        async with Server(ServerOptions(model_repository=[str(broken_repository)])):
            pass


async def test_explicit_load_of_an_invalid_ensemble_raises_its_reason(broken_repository: Path) -> None:
    async with explicit(broken_repository) as server:
        with pytest.raises(InvalidArgument) as info:
            await server.load_model("bad_step_input")
        assert str(info.value) == (
            "load failed for model 'bad_step_input': " + BROKEN_ENSEMBLE_REASONS["bad_step_input"]
        )
        assert (await states(server))["add_sub"] == ("READY", "")  # loaded as its composing model
        failed = re.escape("has no loaded version. Model 'unloadable' loading failed")
        with pytest.raises(InvalidArgument, match=failed):
            await server.load_model("bad_composing_load")


async def test_startup_load_model_loads_composing_models_first(ensemble_repository: Path) -> None:
    async with explicit(ensemble_repository, "ens_nested") as server:
        index = await states(server)
        loaded = {n for n, (state, _) in index.items() if state == "READY"}
        assert loaded == {"ens_nested", "ens_diamond", "ens_chain", "add_sub", "identity16"}
        response = await server.infer(pair("ens_nested", 1.0))
        np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 4.0, np.float32))


async def test_load_model_loads_composing_models_and_unload_dependents(ensemble_repository: Path) -> None:
    async with explicit(ensemble_repository) as server:
        await server.load_model("ens_nested")
        composing = ("ens_diamond", "ens_chain", "add_sub", "identity16")
        index = await states(server)
        assert all(index[n][0] == "READY" for n in ("ens_nested", *composing))
        await server.unload_model("ens_nested")  # composing models stay
        index = await states(server)
        assert index["ens_nested"] == ("UNAVAILABLE", "unloaded")
        assert all(index[n][0] == "READY" for n in composing)
        await server.infer(pair("ens_chain"))
        await server.load_model("ens_nested")
        await server.unload_model("ens_nested", unload_dependents=True)
        index = await states(server)
        assert all(index[n] == ("UNAVAILABLE", "unloaded") for n in ("ens_nested", *composing))


async def test_unload_dependents_keeps_models_loaded_by_name_or_still_used(ensemble_repository: Path) -> None:
    async with explicit(ensemble_repository, "identity16") as server:
        await server.load_model("ens_chain")
        await server.load_model("ens_diamond")
        await server.unload_model("ens_chain", unload_dependents=True)
        index = await states(server)
        assert index["add_sub"][0] == "READY"  # ens_diamond still calls it
        assert index["identity16"][0] == "READY"  # loaded by name
        await server.unload_model("ens_diamond", unload_dependents=True)
        index = await states(server)
        assert index["add_sub"] == ("UNAVAILABLE", "unloaded")
        assert index["identity16"][0] == "READY"


async def test_unloaded_composing_model_makes_its_ensembles_unavailable_until_loaded_again(
    ensemble_repository: Path,
) -> None:
    """Triton's dependency graph: an unloaded model leaves its ensembles (and the ensembles
    calling those) UNAVAILABLE with the reason; loading it again makes them READY again."""
    async with explicit(ensemble_repository, "ens_nested") as server:
        await server.unload_model("identity16")
        index = await server.repository_index()
        rows = {r["name"]: r for r in index if r["name"].startswith("ens_")}
        assert rows["ens_chain"] == {
            "name": "ens_chain", "version": "1", "state": "UNAVAILABLE",
            "reason": "ensemble ens_chain contains models that are not available or ambiguous: identity16",
        }
        assert rows["ens_diamond"]["reason"] == (
            "ensemble ens_diamond contains models that are not available or ambiguous: identity16")
        assert rows["ens_nested"]["state"] == "UNAVAILABLE"
        assert rows["ens_nested"]["reason"].startswith(
            "ensemble 'ens_nested' depends on 'ens_diamond' which has no loaded version.")
        assert (await states(server))["add_sub"] == ("READY", "")
        with pytest.raises(ModelNotFound, match=r"^Request for unknown model: 'ens_chain' has no available versions$"):
            await server.infer(pair("ens_chain"))
        assert not await server.model_ready("ens_nested")
        # strict readiness still holds: Triton unloads these ensembles (AsyncUnload, reason
        # "unloaded"), which its readiness ignores; the index here says why they are out
        assert server.is_ready()

        await server.load_model("identity16")
        reloaded = await states(server)
        assert all(reloaded[n] == ("READY", "") for n in ("ens_chain", "ens_diamond", "ens_nested"))
        response = await server.infer(pair("ens_chain", 2.0))
        np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 4.0, np.float32))
        response = await server.infer(pair("ens_nested", 1.0))
        np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 4.0, np.float32))
        assert server.is_ready()


async def test_explicitly_unloaded_ensemble_stays_unloaded_when_its_models_change(
    ensemble_repository: Path,
) -> None:
    async with explicit(ensemble_repository, "ens_chain") as server:
        await server.unload_model("ens_chain")
        await server.unload_model("identity16")
        await server.load_model("identity16")
        assert (await states(server))["ens_chain"] == ("UNAVAILABLE", "unloaded")


async def test_reloading_a_composing_model_keeps_the_ensemble_serving(ensemble_repository: Path) -> None:
    async with explicit(ensemble_repository, "ens_chain") as server:
        requests = [asyncio.ensure_future(server.infer(pair("ens_chain", float(i)))) for i in range(60)]
        await asyncio.sleep(0)
        await server.load_model("identity16")  # new version beside the old, then switch
        await server.load_model("add_sub")
        requests += [asyncio.ensure_future(server.infer(pair("ens_chain", float(i)))) for i in range(60, 80)]
        responses = await asyncio.gather(*requests)
        for i, response in enumerate(responses):
            np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 2.0 * i, np.float32))


async def test_stop_lets_in_flight_ensemble_requests_finish(tmp_path: Path) -> None:
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    repo = build_fake_ensemble_repository(tmp_path)
    try:
        server = Server(ServerOptions(model_repository=[str(repo)]))
        await server.start()
        BEHAVIOUR.gate.clear()  # step 1 (fake_a) blocks
        data = np.array([[5.0]], np.float32)
        request = asyncio.ensure_future(server.infer(InferenceRequest("ens_fake_chain", [Tensor("IN", "FP32", data)])))
        while not BEHAVIOUR.executions:
            await asyncio.sleep(0.01)
        stopping = asyncio.ensure_future(server.stop())
        await asyncio.sleep(0.05)  # fake_b must not drain before the ensemble
        BEHAVIOUR.gate.set()
        response = await request
        np.testing.assert_array_equal(response.outputs[0].data, data)
        await stopping
        assert BEHAVIOUR.executions == {"fake_a_0_0": 1, "fake_b_0_0": 1}
    finally:
        BEHAVIOUR.reset()
