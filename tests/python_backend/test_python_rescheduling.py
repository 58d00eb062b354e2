"""Request rescheduling (issue 33): a Python model releases a request with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` and, on a model with ``sequence_batching {
iterative_sequence: true }``, the request runs again (Triton's iterative sequences); elsewhere it
fails with Triton's text and the model keeps serving.

One real server for the module; the models are written by the tests (Triton style).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, Tensor
from workbench.common.errors import StatusCode, WorkbenchError
from workbench.testing.python_backend import python_models_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: an hour: a slot an iterative sequence failed to free would hold the next request that long
ITERATIVE = "sequence_batching { iterative_sequence: true max_sequence_idle_microseconds: 3600000000 }"

CONFIGS = {
    "resched_answer": f"""
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] }} ]
{ITERATIVE}
""",
    "resched_wrong_return": f"""
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] }} ]
{ITERATIVE}
""",
    "resched_not_iterative": """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
""",
    "resched_countdown": f"""
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{ITERATIVE}
""",
}

MODELS = {
    # non-decoupled: the first execution of each sequence reschedules, the second answers
    # with what the model saw each time
    "resched_answer": """
class TritonPythonModel:
    def initialize(self, args):
        self.seen = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            runs = self.seen.setdefault(request.correlation_id(), [])
            runs.append(request.flags())
            if len(runs) == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                responses.append(respond({"corr": request.correlation_id(), "flags": runs}))
        return responses
""",
    "resched_wrong_return": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [respond({}) for _ in requests]
""",
    "resched_not_iterative": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if json.loads(request.parameters()).get("reschedule"):
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [None if json.loads(r.parameters()).get("reschedule") else respond({}) for r in requests]
""",
    # decoupled: IN = n sends n-1, ..., 0, one response per execution, rescheduling between
    "resched_countdown": """
class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            corr = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[corr] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.left[corr] -= 1
            out = pb_utils.Tensor("OUT", np.array([self.left[corr]], np.int32))
            sender = request.get_response_sender()
            if self.left[corr] <= 0:
                sender.send(pb_utils.InferenceResponse([out]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(pb_utils.InferenceResponse([out]))
        return None
""",
}

HEADER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def respond(answer):
    data = np.array([json.dumps(answer).encode()], dtype=np.object_)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)])
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("rescheduling")
    for name, code in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + CONFIGS[name])
        (repo / name / "1" / "model.py").write_text(HEADER + textwrap.dedent(code))
    return repo


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(repository: Path):
    async with python_models_server(repository) as engine:
        yield engine


def fp32_request(model: str, **parameters: object) -> InferenceRequest:
    return InferenceRequest(model, [Tensor("INPUT0", "FP32", np.zeros(1, np.float32))], parameters=dict(parameters))


async def answer(server: Server, model: str) -> dict:
    response = await asyncio.wait_for(server.infer(fp32_request(model)), 60)
    return json.loads(response.outputs[0].data[0])


async def countdown(server: Server, start: int) -> list[int]:
    request = InferenceRequest("resched_countdown", [Tensor("IN", "INT32", np.array([start], np.int32))])
    return [int(r.outputs[0].data[0]) async for r in server.infer_stream(request) if r.outputs]


async def test_a_rescheduled_request_runs_again_in_its_iterative_sequence(server: Server) -> None:
    """Before: refused at the door ("must specify a non-zero or non-empty correlation ID"),
    and set_release_flags(RESCHEDULE) raised in the model. The request gets a correlation ID
    of the batcher's and START, then runs again with neither START nor END; each request is a
    sequence of its own (a new ID), and its slot is freed when it is answered (one slot: the
    second request would wait an hour otherwise)."""
    first = await answer(server, "resched_answer")
    second = await answer(server, "resched_answer")
    assert first["flags"] == [1, 0] and second["flags"] == [1, 0]
    assert first["corr"] > 0 and second["corr"] not in (0, first["corr"])


async def test_a_decoupled_model_sends_one_response_per_execution_until_final(server: Server) -> None:
    """Before: refused at the door. Two streams on the one slot run one after the other."""
    answers = await asyncio.wait_for(asyncio.gather(countdown(server, 3), countdown(server, 2)), 60)
    assert list(answers) == [[2, 1, 0], [1, 0]]


async def test_a_response_returned_for_a_rescheduled_request_fails_with_tritons_text(server: Server) -> None:
    with pytest.raises(WorkbenchError) as raised:
        await asyncio.wait_for(server.infer(fp32_request("resched_wrong_return")), 60)
    assert ("Expected a None object in the execute function return list for reschduled request, "
            "found type 'InferenceResponse'") in raised.value.message


async def test_rescheduling_without_iterative_sequence_fails_with_tritons_text(server: Server) -> None:
    """Before: set_release_flags raised "request rescheduling is not supported by this server"."""
    with pytest.raises(WorkbenchError) as raised:
        await asyncio.wait_for(server.infer(fp32_request("resched_not_iterative", reschedule=True)), 60)
    assert raised.value.code is StatusCode.INVALID_ARG
    assert raised.value.message == ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while "
                                    "the model is not configured to handle such a flag.")
    assert await answer(server, "resched_not_iterative") == {}  # the model serves on
