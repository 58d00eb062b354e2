"""Every ensemble response carries ``sequence_id`` / ``sequence_start`` / ``sequence_end``, as
Triton's: each tensor a step makes carries its step's correlation ID and flags (the request's,
or those a composing model's response set), and ``EnsembleContext`` adds them to the response
for each output a step made, 0 / false when the request had no sequence. Checked in-process,
over HTTP (the JSON ``parameters``) and over gRPC (``int64_param`` / ``bool_param``), so the
clients see what Triton's clients see."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.ensembles import build_ensemble_repository

A = np.arange(32, dtype=np.float32).reshape(2, 16)
NONE = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


@pytest.fixture(scope="module")
def ensemble_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble_repository(tmp_path_factory.mktemp("ensembles"))


@pytest_asyncio.fixture
async def server(ensemble_repository: Path):
    async with Server(ServerOptions(model_repository=[str(ensemble_repository)])) as engine:
        yield engine


def chain(**kwargs) -> InferenceRequest:
    return InferenceRequest("ens_chain", [Tensor("IN0", "FP32", A), Tensor("IN1", "FP32", A)], **kwargs)


def sequence_step(value: float, **params) -> InferenceRequest:
    return InferenceRequest("ens_sequence", [Tensor("IN", "FP32", np.array([[value]], np.float32))],
                            parameters=params)


async def test_a_request_without_a_sequence_gets_zero_and_false(server: Server) -> None:
    assert (await server.infer(chain())).parameters == NONE
    nested = InferenceRequest("ens_nested", [Tensor("IN0", "FP32", A), Tensor("IN1", "FP32", A)])
    assert (await server.infer(nested)).parameters == NONE


async def test_a_sequence_request_gets_its_id_and_flags(server: Server) -> None:
    first = await server.infer(sequence_step(1, sequence_id=77, sequence_start=True))
    assert first.parameters == {"sequence_id": 77, "sequence_start": True, "sequence_end": False}
    last = await server.infer(sequence_step(2, sequence_id=77, sequence_end=True))
    assert last.parameters == {"sequence_id": 77, "sequence_start": False, "sequence_end": True}
    assert float(last.outputs[0].data[0, 0]) == 3.0


async def test_http_clients_see_the_parameters(server: Server, asgi_client) -> None:
    body = {"inputs": [{"name": n, "shape": [2, 16], "datatype": "FP32", "data": A.ravel().tolist()}
                       for n in ("IN0", "IN1")]}
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/ens_chain/infer", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["parameters"] == NONE
        seq = {"parameters": {"sequence_id": 5, "sequence_start": True, "sequence_end": True},
               "inputs": [{"name": "IN", "shape": [1, 1], "datatype": "FP32", "data": [4]}]}
        reply = await http.post("/v2/models/ens_sequence/infer", json=seq)
        assert reply.status_code == 200, reply.text
        assert reply.json()["parameters"] == {"sequence_id": 5, "sequence_start": True, "sequence_end": True}


async def test_grpc_clients_see_the_parameters(server: Server, stub_for) -> None:
    stub = await stub_for(server)
    inputs = [pb.ModelInferRequest.InferInputTensor(name=n, datatype="FP32", shape=[2, 16]) for n in ("IN0", "IN1")]
    reply = await stub.ModelInfer(pb.ModelInferRequest(model_name="ens_chain", inputs=inputs,
                                                       raw_input_contents=[A.tobytes(), A.tobytes()]))
    params = reply.parameters
    assert params["sequence_id"].WhichOneof("parameter_choice") == "int64_param"
    assert params["sequence_id"].int64_param == 0
    for key in ("sequence_start", "sequence_end"):
        assert params[key].WhichOneof("parameter_choice") == "bool_param"
        assert params[key].bool_param is False
