"""The Python backend on real Triton-style models: engine, HTTP and gRPC, one shared server.

Every model is a ``model.py`` written as Triton's python_backend examples are
(``workbench/testing/python_models``); each instance runs in its own stub process. The
server is shared by the whole module (stub processes take ~0.3 s each to start), so these
tests only use models nobody else changes; crash and unload tests have their own servers
(``test_python_backend_lifecycle.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import (
    InferenceRequest,
    InferenceResponse,
    InternalError,
    InvalidArgument,
    NotFound,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model
from workbench.testing.python_backend import copy_python_model, python_backend_segments
from workbench.testing.repeat_backend import collect_stream, repeat_request

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODELS = ("add_sub", "identity", "string_identity", "raiser", "error_response", "wrong_count",
          "repeat", "bls_sync", "bls_async", "bls_decoupled", "auto_complete", "helper_import",
          "init_fails", "batch_count", "sleeper", "empty_output", "sender_once")


@pytest.fixture(scope="module")
def python_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("python_models")
    for name in MODELS:
        copy_python_model(repo, name)
    copy_python_model(repo, "auto_complete", "no_config_file", config=False)
    copy_python_model(repo, "repeat", "repeat_slow", parameters={"DELAY_MS": "30"})
    copy_python_model(repo, "bls_decoupled", "bls_decoupled_unknown", parameters={"TARGET": "no_such_model"})
    write_model(repo, "add_sub_onnx", ADD_SUB_CONFIG.replace('"add_sub"', '"add_sub_onnx"'), add_sub_graph())
    return repo


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(python_repository: Path):
    options = ServerOptions(model_repository=[str(python_repository)], exit_on_error=False)
    async with Server(options) as engine:
        yield engine
    assert python_backend_segments() == []


def fp32(name: str, data) -> Tensor:
    return Tensor(name, "FP32", np.asarray(data, dtype=np.float32))


def add_sub_request(model: str = "add_sub", **fields) -> InferenceRequest:
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2, np.float32)
    return InferenceRequest(model, [fp32("INPUT0", a), fp32("INPUT1", b)], **fields)


# ----------------------------------------------------------------- basics
async def test_add_sub_through_the_engine(server: Server) -> None:
    response = await server.infer(add_sub_request(id="req-1", parameters={"custom": "x", "priority": 0}))
    outputs = {t.name: t.data.tolist() for t in response.outputs}
    assert outputs == {"OUTPUT0": [2, 3, 4, 5], "OUTPUT1": [-2, -1, 0, 1]}
    assert response.id == "req-1"
    info = json.loads(response.parameters["info"])
    assert info["request_id"] == "req-1"
    assert info["parameters"] == {"custom": "x"}  # engine keys (priority) are not the model's
    assert info["requested"] == ["OUTPUT0", "OUTPUT1"] and info["flags"] == 0
    args = info["args"]
    assert {k: args[k] for k in ("model_name", "model_version", "model_instance_name",
                                 "model_instance_kind", "model_instance_device_id")} == {
        "model_name": "add_sub", "model_version": "1", "model_instance_name": "add_sub_0_0",
        "model_instance_kind": "CPU", "model_instance_device_id": "0"}
    assert args["model_repository"].endswith("add_sub")
    assert json.loads(args["model_config"])["input"][0]["data_type"] == "TYPE_FP32"


async def test_response_parameters_reach_grpc_clients(server: Server, grpc_stub) -> None:
    inputs = [pb.ModelInferRequest.InferInputTensor(name=n, datatype="FP32", shape=[4]) for n in ("INPUT0", "INPUT1")]
    raw = [np.arange(4, dtype=np.float32).tobytes(), np.full(4, 2, np.float32).tobytes()]
    async with grpc_stub(server) as stub:
        reply = await stub.ModelInfer(pb.ModelInferRequest(
            model_name="add_sub", id="g", inputs=inputs, raw_input_contents=raw))
    assert json.loads(reply.parameters["info"].string_param)["request_id"] == "g"


async def test_requested_outputs_only(server: Server) -> None:
    response = await server.infer(add_sub_request(outputs=[RequestedOutput("OUTPUT1")]))
    assert [t.name for t in response.outputs] == ["OUTPUT1"]
    assert json.loads(response.parameters["info"])["requested"] == ["OUTPUT1"]


async def test_add_sub_over_http(server: Server, asgi_client) -> None:
    body = {"id": "h1", "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]}
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/add_sub/infer", json=body)
        config = (await http.get("/v2/models/add_sub/config")).json()
    assert reply.status_code == 200, reply.text
    assert {o["name"]: o["data"] for o in reply.json()["outputs"]} == {
        "OUTPUT0": [2, 3, 4, 5], "OUTPUT1": [0, 1, 2, 3]}
    assert config["backend"] == "python" and config["default_model_filename"] == "model.py"


async def test_bytes_tensors_are_object_arrays_of_bytes(server: Server, asgi_client) -> None:
    strings = np.array([[b"ab", b"", "h\u00e9".encode()], [b"\x00\xff", b"x", b"yz"]], dtype=object)
    response = await server.infer(InferenceRequest("string_identity", [Tensor("INPUT0", "BYTES", strings)]))
    out = {t.name: t.data for t in response.outputs}
    assert out["OUTPUT0"].tolist() == strings.tolist() and out["OUTPUT0"].dtype == object
    assert out["LENGTHS"].tolist() == [[2, 0, 3], [2, 1, 2]]
    body = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "bc"]}]}
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/string_identity/infer", json=body)
    assert {o["name"]: o["data"] for o in reply.json()["outputs"]} == {"OUTPUT0": ["a", "bc"], "LENGTHS": [1, 2]}


@pytest.mark.parametrize("batch", [1, 2, 4])
async def test_zero_element_tensors_in_and_out(server: Server, asgi_client, batch: int) -> None:
    """[N,0] BYTES in, [N,0] BYTES + INT32 out: 200 with the empty tensors, as Triton (was 500)."""
    body = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [batch, 0], "data": []}]}
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/string_identity/infer", json=body)
    assert reply.status_code == 200, reply.text
    assert {o["name"]: (o["shape"], o["data"]) for o in reply.json()["outputs"]} == {
        "OUTPUT0": ([batch, 0], []), "LENGTHS": ([batch, 0], [])}


@pytest.mark.parametrize(("mode", "added"), [
    ("return", 0), ("send_final", 1000), ("send_then_final", 1000), ("send_after_return", 2000),
    ("send_and_return", 1000), ("send_twice", 1000)])
async def test_non_decoupled_model_answers_through_its_response_sender(
        server: Server, asgi_client, mode: str, added: int) -> None:
    """Triton's python_backend: a non-decoupled model may send its one response with
    ``get_response_sender()`` (then FINAL); a response returned or sent beyond it fails in
    the model, and the response already sent still reaches the client (was 500)."""
    body = {"parameters": {"mode": mode},
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/sender_once/infer", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"] == [1 + added, 2 + added]


async def test_non_decoupled_final_flag_without_a_response_is_an_error(server: Server) -> None:
    request = InferenceRequest("sender_once", [fp32("INPUT0", [1])], parameters={"mode": "final_only"})
    with pytest.raises(InternalError, match="Non-decoupled model cannot send complete final "
                                            "before sending a response"):
        await server.infer(request)
    response = await server.infer(InferenceRequest("sender_once", [fp32("INPUT0", [3])]))
    assert response.outputs[0].data.tolist() == [3]  # the instance serves on


async def test_model_imports_files_next_to_it(server: Server) -> None:
    response = await server.infer(InferenceRequest("helper_import", [fp32("INPUT0", [1, 2])]))
    assert response.outputs[0].data.tolist() == [3, 6]


async def test_logger_lines_reach_the_server_log(python_repository: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="workbench.python_model")
    async with Server(ServerOptions(model_repository=[str(python_repository)],
                                    model_control_mode="explicit", load_model=["add_sub"])):
        pass
    records = [r for r in caplog.records if r.name == "workbench.python_model"]
    assert [r.getMessage() for r in records] == ["add_sub initialized as add_sub_0_0"]
    assert records[0].filename == "model.py" and records[0].levelname == "INFO"


# ----------------------------------------------------------------- large tensors, shared memory
@pytest.mark.parametrize("megabytes", [16, 64])
async def test_large_tensor_round_trips_reuse_shared_memory(server: Server, megabytes: int) -> None:
    rng = np.random.default_rng(megabytes)
    counts = []
    for _ in range(4):
        data = rng.random(megabytes * 2**20 // 4, dtype=np.float32)
        response = await server.infer(InferenceRequest("identity", [fp32("INPUT0", data)]))
        assert np.array_equal(response.outputs[0].data, data)
        del response
        counts.append(len(python_backend_segments()))
    # segments are reused, not added per request (and all removed at unload: see `server`)
    assert counts[1] == counts[2] == counts[3], counts


# ----------------------------------------------------------------- errors
async def test_an_empty_output_of_another_numpy_dtype_is_served_as_the_configured_one(server: Server) -> None:
    """np.array([]) (float64, no element) for a BYTES output: Triton serves it (its generate
    endpoint answers ``[]``); the engine refused it as a datatype mismatch (500)."""
    response = await server.infer(InferenceRequest("empty_output", [fp32("INPUT0", [1.0])]))
    [text] = response.outputs
    assert (text.name, text.datatype, text.data.shape) == ("TEXT", "BYTES", (0,))


async def test_exception_in_execute_fails_the_request_with_its_text(server: Server) -> None:
    with pytest.raises(InternalError) as caught:
        await server.infer(InferenceRequest("raiser", [fp32("INPUT0", [1.5])]))
    assert caught.value.message.startswith(
        "Failed to process the request(s) for model instance 'raiser_0', message: "
        "ValueError: cannot handle input 1.5")
    assert "model.py(" in caught.value.message  # Triton's "At:" frames
    assert await server.model_ready("raiser")


async def test_error_response_fails_only_its_request(server: Server) -> None:
    values = [1.0, -2.0, 3.0]
    results = await asyncio.gather(*(
        server.infer(InferenceRequest("error_response", [fp32("INPUT0", [[v]])])) for v in values
    ), return_exceptions=True)
    first, failed, third = results
    assert isinstance(first, InferenceResponse) and isinstance(third, InferenceResponse)
    assert [r.outputs[0].data.tolist() for r in (first, third)] == [[[1.0]], [[3.0]]]
    assert isinstance(failed, InvalidArgument)
    assert failed.message == "negative input -2.0 is not allowed"


async def test_wrong_number_of_responses_fails_the_batch(server: Server) -> None:
    with pytest.raises(InternalError, match=r"Number of InferenceResponse objects do not match the "
                       r"number of InferenceRequest objects. InferenceRequest\(s\) size is:1, and "
                       r"InferenceResponse\(s\) size is:2"):
        await server.infer(InferenceRequest("wrong_count", [fp32("INPUT0", [1])]))


async def test_initialize_failure_is_unavailable_with_the_reason(server: Server, asgi_client) -> None:
    index = {row["name"]: row for row in await server.repository_index()}
    row = index["init_fails"]
    assert row["state"] == "UNAVAILABLE"
    assert "initialize() of model instance 'init_fails_0' failed: RuntimeError: cannot open " \
           "weights file 'missing.bin'" in row["reason"]
    assert index["add_sub"]["state"] == "READY"
    async with asgi_client(server) as http:
        assert (await http.get("/v2/models/init_fails/ready")).status_code == 400
        assert (await http.post("/v2/models/add_sub/infer", json={"inputs": [
            {"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]} for i in (0, 1)
        ]})).status_code == 200


# ----------------------------------------------------------------- batching, auto-complete
async def test_dynamic_batching_gives_execute_several_requests(server: Server) -> None:
    requests = [InferenceRequest("batch_count", [fp32("INPUT0", [[i]])]) for i in range(4)]
    responses = await asyncio.gather(*(server.infer(r) for r in requests))
    assert [r.outputs[0].data.tolist() for r in responses] == [[[0]], [[1]], [[2]], [[3]]]
    assert {int(r.outputs[1].data[0, 0]) for r in responses} == {4}
    stats = (await server.statistics("batch_count"))["model_stats"][0]
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]


@pytest.mark.parametrize("model", ["auto_complete", "no_config_file"])
async def test_auto_complete_config_fills_the_config(server: Server, model: str) -> None:
    config = await server.model_config(model)
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in config.input] == [("INPUT0", [4])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [4])]
    response = await server.infer(InferenceRequest(model, [fp32("INPUT0", np.ones((2, 4)))]))
    assert response.outputs[0].data.tolist() == [[2.0] * 4] * 2


# ----------------------------------------------------------------- decoupled


async def test_decoupled_model_streams_responses_sent_from_a_thread(server: Server) -> None:
    responses = await collect_stream(server, repeat_request([7, 8, 9], request_id="d1"))
    assert [(r.final, [t.data.tolist() for t in r.outputs]) for r in responses] == [
        (False, [[7], [0]]), (False, [[8], [1]]), (False, [[9], [2]]), (True, [])]
    assert {r.id for r in responses} == {"d1"}
    assert [r.final for r in await collect_stream(server, repeat_request([]))] == [True]


async def test_decoupled_error_response_ends_the_stream(server: Server) -> None:
    seen = []
    with pytest.raises(InternalError, match="negative value -1 at 1"):
        async for response in server.infer_stream(repeat_request([4, -1, 5])):
            seen.append(int(response.outputs[0].data[0]))
    assert seen == [4]


async def test_decoupled_over_grpc_stream(server: Server, grpc_stub) -> None:
    async with grpc_stub(server) as stub:
        call = stub.ModelStreamInfer()
        for request_id, values in (("a", [1, 2, 3]), ("b", [10, 20])):
            tensor = pb.ModelInferRequest.InferInputTensor(name="IN", datatype="INT32", shape=[len(values)])
            message = pb.ModelInferRequest(model_name="repeat_slow", id=request_id, inputs=[tensor],
                                           raw_input_contents=[np.array(values, np.int32).tobytes()])
            message.parameters["triton_enable_empty_final_response"].bool_param = True
            await call.write(message)
        await call.done_writing()
        received = []
        async for reply in call:
            assert not reply.error_message
            response = reply.infer_response
            value = int(np.frombuffer(response.raw_output_contents[0], np.int32)[0]) \
                if response.raw_output_contents else None
            received.append((response.id, value, response.parameters["triton_final_response"].bool_param))
    assert [(v, f) for i, v, f in received if i == "a"] == [(1, False), (2, False), (3, False), (None, True)]
    assert [(v, f) for i, v, f in received if i == "b"] == [(10, False), (20, False), (None, True)]


# ----------------------------------------------------------------- BLS
def bls_request(model: str, target: str) -> InferenceRequest:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return InferenceRequest(model, [
        Tensor("MODEL_NAME", "BYTES", np.array([target.encode()], dtype=object)),
        fp32("INPUT0", a), fp32("INPUT1", np.ones((1, 16))),
    ])


@pytest.mark.parametrize("bls", ["bls_sync", "bls_async"])
async def test_bls_calls_an_onnx_model(server: Server, bls: str) -> None:
    before = (await server.statistics("add_sub_onnx"))["model_stats"][0]["inference_count"]
    response = await server.infer(bls_request(bls, "add_sub_onnx"))
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    assert response.outputs[0].data.tolist() == (a + 1).tolist()
    assert response.outputs[1].data.tolist() == (a - 1).tolist()
    after = (await server.statistics("add_sub_onnx"))["model_stats"][0]["inference_count"]
    assert after - before == (3 if bls == "bls_sync" else 4)  # the model's concurrent calls


@pytest.mark.parametrize("bls", ["bls_sync", "bls_async"])
async def test_concurrent_bls_calls_are_batched_by_the_callee(server: Server, bls: str) -> None:
    await server.infer(bls_request(bls, "sleeper"))  # sleeper sleeps 200 ms per execution
    stats = (await server.statistics("sleeper"))["model_stats"][0]
    # three calls in one execution of the callee were in flight together (serial calls would
    # be three executions of 1); no upper bound on the time taken, which a busy machine breaks
    assert max(b["batch_size"] for b in stats["batch_stats"]) >= 3


@pytest.mark.parametrize("bls", ["bls_sync", "bls_async"])
async def test_bls_unknown_model_comes_back_as_an_error_response(server: Server, bls: str) -> None:
    with pytest.raises(NotFound) as caught:
        await server.infer(bls_request(bls, "no_such_model"))
    # Triton's text (python_backend's request_executor.cc), which NVIDIA's bls unittests match
    assert caught.value.message == ("Model no_such_model - Error when running inference: "
                                    "Request for unknown model: 'no_such_model' is not found")


async def test_decoupled_bls_to_an_unknown_model_reads_as_tritons(server: Server) -> None:
    request = InferenceRequest("bls_decoupled_unknown", [Tensor("IN", "INT32", np.array([4], np.int32))])
    with pytest.raises(NotFound) as caught:
        await server.infer(request)
    assert caught.value.message == ("Model no_such_model - Error when running inference: "
                                    "Request for unknown model: 'no_such_model' is not found")


async def test_bls_input_refused_before_execution_is_prefixed(server: Server) -> None:
    """A request the engine refuses at validation (no inputs for add_sub_onnx) gets the
    prefix too; the callee's own failure (below, "negative value") does not."""
    with pytest.raises(InvalidArgument) as caught:
        await server.infer(bls_request("bls_sync", "string_identity"))
    assert caught.value.message.startswith("Model string_identity - Error when running inference: ")


async def test_bls_to_a_decoupled_model_iterates_its_responses(server: Server) -> None:
    request = InferenceRequest("bls_decoupled", [Tensor("IN", "INT32", np.array([4, 5, 6], np.int32))])
    response = await server.infer(request)
    assert {t.name: int(t.data[0]) for t in response.outputs} == {"SUM": 15, "COUNT": 3}
    with pytest.raises(InternalError, match="negative value -5 at 1") as caught:
        await server.infer(InferenceRequest("bls_decoupled", [Tensor("IN", "INT32", np.array([4, -5], np.int32))]))
    assert "Error when running inference" not in caught.value.message
