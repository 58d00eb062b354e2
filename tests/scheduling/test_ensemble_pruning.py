"""Ensemble step pruning and tensors a composing model did not produce (Triton's
L0_simple_ensemble ``ensemble_add_sub_one_output`` / ``ensemble_partial_add_sub`` and
L0_optional_input ``optional_connecting_tensor``): real engine, ``fake`` backend models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, InvalidArgument, RequestedOutput, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.ensembles import build_fake_ensemble_repository, ensemble_config, write_ensemble
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, FakeBackend, write_backend_model

F1 = [1]
TWO_OUTPUTS = FAKE_CONFIG.replace(
    'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]',
    'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}, '
    '{{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] }} ]',
)
OPTIONAL_SECOND_INPUT = FAKE_CONFIG.replace(
    'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]',
    'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}, '
    '{{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]',
)


def build_repository(repo: Path) -> Path:
    """``ens_fake_pair`` (IN -> fake_a -> A, IN -> fake_b -> B); ``partial`` (declares
    OUTPUT0 and OUTPUT1, returns only OUTPUT0, as the fake backend does); ``optional_in``
    (INPUT1 optional); ``fake_c``;

    - ``ens_partial``: IN -> partial -> (a, B); (a, B) -> optional_in -> OUT; outputs OUT, B.
    - ``ens_required``: IN -> partial -> (OUT, b); b -> fake_c (INPUT0 required) -> C.
    """
    build_fake_ensemble_repository(repo)
    write_backend_model(repo, "partial", TWO_OUTPUTS.format(name="partial", count=1, group=""))
    write_backend_model(repo, "optional_in", OPTIONAL_SECOND_INPUT.format(name="optional_in", count=1, group=""))
    write_backend_model(repo, "fake_c", FAKE_CONFIG.format(name="fake_c", count=1, group=""))
    one = [("IN", "TYPE_FP32", F1)]
    write_ensemble(repo, "ens_partial", ensemble_config(
        "ens_partial", one, [("OUT", "TYPE_FP32", F1), ("B", "TYPE_FP32", F1)],
        [
            ("partial", {"INPUT0": "IN"}, {"OUTPUT0": "a", "OUTPUT1": "B"}),
            ("optional_in", {"INPUT0": "a", "INPUT1": "B"}, {"OUTPUT0": "OUT"}),
        ],
        max_batch_size=4,
    ))
    write_ensemble(repo, "ens_required", ensemble_config(
        "ens_required", one, [("OUT", "TYPE_FP32", F1), ("C", "TYPE_FP32", F1)],
        [
            ("partial", {"INPUT0": "IN"}, {"OUTPUT0": "OUT", "OUTPUT1": "b"}),
            ("fake_c", {"INPUT0": "b"}, {"OUTPUT0": "C"}),
        ],
        max_batch_size=4,
    ))
    return repo


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("pruning"))


@pytest_asyncio.fixture
async def server(repository: Path):
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    async with Server(ServerOptions(model_repository=[str(repository)])) as engine:
        yield engine
    BEHAVIOUR.reset()


def request(model: str, *outputs: str, value: float = 4.0) -> InferenceRequest:
    data = np.full((1, 1), value, np.float32)
    asked = [RequestedOutput(name) for name in outputs] or None
    return InferenceRequest(model, [Tensor("IN", "FP32", data)], outputs=asked)


async def success_count(server: Server, model: str) -> int:
    stats = (await server.statistics(model))["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"])


async def test_a_step_leading_to_no_requested_output_does_not_run(server: Server) -> None:
    response = await server.infer(request("ens_fake_pair", "A"))
    assert [t.name for t in response.outputs] == ["A"]
    assert (await success_count(server, "fake_a"), await success_count(server, "fake_b")) == (1, 0)
    both = await server.infer(request("ens_fake_pair"))
    assert [t.name for t in both.outputs] == ["A", "B"]
    assert await success_count(server, "fake_b") == 1


async def test_an_output_not_produced_is_left_out_of_the_response(server: Server) -> None:
    response = await server.infer(request("ens_partial", "OUT", "B", value=6.0))
    assert [t.name for t in response.outputs] == ["OUT"]
    np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 1), 6.0, np.float32))
    assert await success_count(server, "optional_in") == 1  # ran without its optional INPUT1
    assert await success_count(server, "ens_partial") == 1


async def test_a_required_input_not_produced_is_the_models_invalid_argument(server: Server) -> None:
    with pytest.raises(InvalidArgument, match="fake_c"):
        await server.infer(request("ens_required", "C"))
    only_out = await server.infer(request("ens_required", "OUT"))  # fake_c pruned
    assert [t.name for t in only_out.outputs] == ["OUT"]
    assert await success_count(server, "fake_c") == 0
