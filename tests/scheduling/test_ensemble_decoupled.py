"""Ensembles with decoupled composing models (Triton's L0_decoupled ensembles), and
``max_inflight_requests`` backpressure (L0_simple_ensemble): real engine and schedulers,
the ``repeat`` / ``square`` / ``fake`` test backends at the backend boundary."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import pytest_asyncio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import DecoupledNotSupported, Server, ServerOptions
from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.registry import register_backend
from workbench.testing.ensembles import ensemble_config, write_ensemble
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_backend_model
from workbench.testing.repeat_backend import (
    RepeatBackend,
    SquareBackend,
    SquareInstance,
    collect_stream,
    repeat_request,
    write_repeat_model,
    write_square_model,
)
from workbench.testing.waits import until

INT32_IDENTITY = """
name: "{name}"
backend: "fake"
max_batch_size: 0
input [ {inputs} ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
IN = [("IN", "TYPE_INT32", [-1])]
OUT = [("OUT", "TYPE_INT32", [1])]
IDX = [("IDX", "TYPE_INT32", [1])]


def _identity(repo: Path, name: str, inputs: int = 1) -> None:
    io = ", ".join(f'{{ name: "INPUT{i}" data_type: TYPE_INT32 dims: [ 1 ] }}' for i in range(inputs))
    config = INT32_IDENTITY.replace("{name}", name).replace("{inputs}", io)
    write_backend_model(repo, name, config)


def _ensemble(repo: Path, name: str, outputs, steps, limit: int = 0) -> None:
    config = ensemble_config(name, IN, outputs, steps, max_batch_size=0)
    if limit:
        config = config.replace("ensemble_scheduling { ", f"ensemble_scheduling {{ max_inflight_requests: {limit} ")
    write_ensemble(repo, name, config)


def build_repository(repo: Path) -> Path:
    """repeat / repeat2 (decoupled: one response per IN element), square (decoupled: [n] ->
    n responses of n), identity_int32 (INT32 [1], 2 instances), two_in_int32; and the
    ensembles of L0_decoupled over them."""
    write_repeat_model(repo, "repeat")
    write_repeat_model(repo, "repeat2")
    write_square_model(repo, "square")
    _identity(repo, "identity_int32")
    _identity(repo, "two_in_int32", inputs=2)
    repeat_to = ("repeat", {"IN": "IN"}, {"OUT": "r"})
    _ensemble(repo, "repeat_square", OUT, [repeat_to, ("square", {"IN": "r"}, {"OUT": "OUT"})])
    _ensemble(repo, "simple_repeat", OUT + IDX, [("repeat", {"IN": "IN"}, {"OUT": "OUT", "IDX": "IDX"})])
    _ensemble(repo, "nested_square", OUT, [
        ("simple_repeat", {"IN": "IN"}, {"OUT": "r"}), ("square", {"IN": "r"}, {"OUT": "OUT"}),
    ])
    _ensemble(repo, "sequence_repeat", OUT + IDX, [
        ("repeat", {"IN": "IN"}, {"OUT": "r", "IDX": "IDX"}),
        ("identity_int32", {"INPUT0": "r"}, {"OUTPUT0": "OUT"}),
    ])
    to_identity = ("identity_int32", {"INPUT0": "r"}, {"OUTPUT0": "OUT"})
    _ensemble(repo, "square_identity", OUT, [
        ("square", {"IN": "IN"}, {"OUT": "r"}), to_identity,
    ])
    _ensemble(repo, "limited", OUT, [repeat_to, to_identity], limit=1)
    _ensemble(repo, "unlimited", OUT, [repeat_to, to_identity])
    _ensemble(repo, "mixed_decoupled", OUT, [
        ("repeat", {"IN": "IN"}, {"OUT": "x"}),
        ("repeat2", {"IN": "IN"}, {"OUT": "y"}),
        ("two_in_int32", {"INPUT0": "x", "INPUT1": "y"}, {"OUTPUT0": "z"}),
        ("identity_int32", {"INPUT0": "z"}, {"OUTPUT0": "OUT"}),
    ])
    return repo


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("decoupled_ensembles"))


def register_backends() -> None:
    for name, backend in (("repeat", RepeatBackend), ("square", SquareBackend), ("fake", FakeBackend)):
        register_backend(name, backend)


@pytest_asyncio.fixture
async def server(repository: Path):
    register_backends()
    BEHAVIOUR.reset()
    async with Server(ServerOptions(model_repository=[str(repository)], exit_on_error=False)) as engine:
        yield engine
    BEHAVIOUR.reset()


def executions(server: Server, model: str) -> int:
    return sum(s.execution_count for s in server.model_statistics() if s.name == model)


def values(responses, name: str = "OUT") -> list[int]:
    return [int(t.data[0]) for r in responses for t in r.outputs if t.name == name]


async def test_every_response_of_a_decoupled_step_feeds_the_next_step(server: Server) -> None:
    config = await server.model_config("repeat_square")
    assert config.model_transaction_policy.decoupled  # Triton marks the ensemble decoupled
    responses = await collect_stream(server, repeat_request([2, 3], model="repeat_square", request_id="q"))
    assert values(responses) == [2, 2, 3, 3, 3]  # one response per square response
    assert [r.final for r in responses] == [False] * 5 + [True]
    assert responses[-1].outputs == [] and {r.id for r in responses} == {"q"}
    assert {r.model_name for r in responses} == {"repeat_square"}
    stats = (await server.statistics("repeat_square"))["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 1
    # a decoupled step counts its success when its execution returns, which may come after
    # the response it sent last has reached the stream
    square = next(s for s in server.model_statistics() if s.name == "square")
    await until(lambda: square.stats["success"].count == 2, "square's two executions counted")
    assert (await server.statistics("square"))["model_stats"][0]["inference_stats"]["success"]["count"] == 2


async def test_a_decoupled_ensemble_as_a_step(server: Server) -> None:
    responses = await collect_stream(server, repeat_request([1, 2], model="nested_square"))
    assert values(responses) == [1, 2, 2]
    assert responses[-1].final and responses[-1].outputs == []


async def test_outputs_of_two_steps_pair_up_per_response(server: Server) -> None:
    request = repeat_request([7, 8, 9], model="sequence_repeat")
    request.parameters = {"sequence_id": 42, "sequence_start": True, "sequence_end": False}
    responses = await collect_stream(server, request)
    data = [r for r in responses if r.outputs]
    assert [r.parameters for r in data] == [request.parameters] * 3  # as Triton's responses
    assert [sorted(t.name for t in r.outputs) for r in data] == [["IDX", "OUT"]] * 3
    pairs = sorted((int(dict((t.name, t.data) for t in r.outputs)["IDX"][0]),
                    int(dict((t.name, t.data) for t in r.outputs)["OUT"][0])) for r in data)
    assert pairs == [(0, 7), (1, 8), (2, 9)]


async def test_the_response_formed_with_no_step_in_flight_carries_the_final_flag(server: Server) -> None:
    # L0_simple_ensemble's producer -> consumer ensembles: the producer has closed its request
    # when the consumer answers, so that answer is the ensemble's last response and carries
    # the final flag, as Triton's does; a gRPC client that did not ask for empty final
    # responses never saw its stream end when it came as a separate flag-only response
    BEHAVIOUR.gate.clear()  # the identity step waits
    streaming = asyncio.create_task(collect_stream(server, repeat_request([1], model="square_identity")))
    await BEHAVIOUR.executing(1)
    await until(lambda: executions(server, "square") >= 1, "the square step to close its request")
    BEHAVIOUR.gate.set()
    responses = await streaming
    assert [(values([r]), r.final) for r in responses] == [([1], True)]


async def test_a_decoupled_ensemble_with_no_response_sends_only_the_final_flag(server: Server) -> None:
    responses = await collect_stream(server, repeat_request([], model="repeat_square"))
    assert [(r.outputs, r.final) for r in responses] == [([], True)]


async def test_decoupled_ensemble_outside_a_stream_needs_exactly_one_response(server: Server) -> None:
    response = await server.infer(repeat_request([1], model="repeat_square"))
    assert values([response]) == [1]
    with pytest.raises(DecoupledNotSupported):
        await server.infer(repeat_request([2], model="repeat_square"))


async def test_a_step_error_response_fails_the_ensemble_stream(server: Server) -> None:
    seen = []
    with pytest.raises(Exception, match=r"^in ensemble 'repeat_square', .*negative value -1 at 1"):
        async for response in server.infer_stream(repeat_request([1, -1], model="repeat_square")):
            seen.extend(values([response]))
    assert await server.model_ready("repeat_square")


async def test_inputs_from_different_decoupled_models_are_refused_at_load(server: Server) -> None:
    rows = {row["name"]: row for row in await server.repository_index()}
    assert rows["mixed_decoupled"]["state"] == "UNAVAILABLE"
    assert rows["mixed_decoupled"]["reason"] == (
        "in ensemble mixed_decoupled, step of model 'two_in_int32' receives inputs originated "
        "from different decoupled models"
    )


async def test_without_a_limit_steps_of_one_request_run_concurrently(server: Server) -> None:
    BEHAVIOUR.barrier = threading.Barrier(2)  # both identity executions must meet
    responses = await collect_stream(server, repeat_request([1, 2], model="unlimited"))
    assert sorted(values(responses)) == [1, 2]
    assert BEHAVIOUR.max_active == 2


async def test_max_inflight_requests_bounds_the_step_requests_in_flight(server: Server) -> None:
    BEHAVIOUR.slow_values = {1.0, 2.0, 3.0, 4.0}
    BEHAVIOUR.slow_s = 0.05  # each identity execution takes a while: the producer runs ahead
    responses = await collect_stream(server, repeat_request([1, 2, 3, 4], model="limited"))
    assert values(responses) == [1, 2, 3, 4]  # one at a time, so in order
    assert BEHAVIOUR.max_active == 1  # the identity model has 2 instances
    assert (await server.model_config("limited")).ensemble_scheduling.max_inflight_requests == 1



async def test_a_limit_is_logged_at_load_as_triton_does(repository: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="workbench.scheduling.ensemble")
    register_backends()
    async with Server(ServerOptions(model_repository=[str(repository)], exit_on_error=False)):
        pass
    lines = [r.getMessage() for r in caplog.records if "max_inflight_requests" in r.getMessage()]
    assert lines == ["Ensemble model 'limited' configured with max_inflight_requests: 1"]


# ------------------------------------------------------------------ a composing model turns decoupled
FLEX_CONFIG = """
name: "flex"
backend: "flex"
max_batch_size: 0
model_transaction_policy {{ decoupled: {decoupled} }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""


class FlexInstance(SquareInstance):
    """``square`` when its model is decoupled; else one response ``OUT`` = ``IN``."""

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        if all(r.response_sender is not None for r in requests):
            return super().execute(requests, times)
        times.mark_input_done()
        times.mark_infer_done()
        return [BackendResponse({"OUT": r.inputs["IN"].reshape(1)}) for r in requests]


class FlexBackend(Backend):
    names = ("flex",)

    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        return FlexInstance(spec)


async def test_ensemble_follows_a_composing_model_reloaded_as_decoupled(tmp_path: Path) -> None:
    """Triton's dependency graph reloads the ensembles downstream of a modified model
    (``UpdateNodes`` unchecks them, ``LoadModelByDependency`` loads them again), so the
    ensemble's decoupled flag follows the reloaded composing model: never an INTERNAL error
    for a request that gets more responses than it was set up for."""
    register_backend("flex", FlexBackend)
    (tmp_path / "flex" / "1").mkdir(parents=True)
    (tmp_path / "flex" / "config.pbtxt").write_text(FLEX_CONFIG.format(decoupled="false"))
    write_ensemble(tmp_path, "ens_flex", ensemble_config(
        "ens_flex", [("IN", "TYPE_INT32", [1])], OUT, [("flex", {"IN": "IN"}, {"OUT": "OUT"})], max_batch_size=0))
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["ens_flex"])
    async with Server(options) as server:
        request = repeat_request([2], model="ens_flex")
        assert values([await server.infer(request)]) == [2]

        (tmp_path / "flex" / "config.pbtxt").write_text(FLEX_CONFIG.format(decoupled="true"))
        await server.load_model("flex")
        assert (await server.model_config("ens_flex")).model_transaction_policy.decoupled
        responses = await collect_stream(server, repeat_request([2], model="ens_flex"))
        assert values(responses) == [2, 2] and responses[-1].final
        with pytest.raises(DecoupledNotSupported):  # Triton's one-response error, not INTERNAL
            await server.infer(repeat_request([2], model="ens_flex"))

        (tmp_path / "flex" / "config.pbtxt").write_text(FLEX_CONFIG.format(decoupled="false"))
        await server.load_model("flex")
        assert not (await server.model_config("ens_flex")).model_transaction_policy.decoupled
        assert values([await server.infer(repeat_request([3], model="ens_flex"))]) == [3]


async def test_response_cache_on_an_ensemble_made_decoupled_is_refused(tmp_path: Path) -> None:
    """L0_response_cache (R1): an ensemble with ``response_cache { enable: true }`` whose
    composing model is decoupled is decoupled too (Triton marks it so at load), and a decoupled
    model cannot use the cache: UNAVAILABLE with Triton's text; without the cache it serves."""
    register_backends()
    write_repeat_model(tmp_path, "repeat")
    for name, extra in (("cached", "response_cache { enable: true }\n"), ("uncached", "")):
        config = ensemble_config(name, IN, OUT + IDX, [("repeat", {"IN": "IN"}, {"OUT": "OUT", "IDX": "IDX"})],
                                 max_batch_size=0)
        write_ensemble(tmp_path, name, config + extra)
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False, response_cache_byte_size=10480)
    async with Server(options) as server:
        rows = {r["name"]: r for r in await server.repository_index()}
    assert rows["uncached"]["state"] == "READY"
    assert rows["cached"]["state"] == "UNAVAILABLE"
    assert rows["cached"]["reason"] == ("Response Cache does not currently support model cached with 'decoupled' "
                                        "transaction policy. Please disable the response cache.")
