"""Fuzz tier: random and mutated infer requests never get a 500 / INTERNAL / UNKNOWN.

Hypothesis builds requests for the real ONNX test models (``add_sub``, ``fixed_shape``, the
``identity_<type>`` models) and sends them to one real engine through the in-process HTTP
app (JSON bodies, binary-extension bodies with ``Inference-Header-Content-Length``,
compressed bodies, arbitrary JSON, byte-mutated valid bodies) and a grpc.aio server on port
0 (``ModelInferRequest`` messages: raw and typed contents, parameters, requested outputs;
byte-mutated messages; undecodable bytes; and, on raw HTTP/2 frames, messages sent with
``grpc-encoding: gzip`` / ``deflate``: compressed requests, compressed bytes mutated, truncated or
followed by junk, bombs that inflate past ``--grpc-max-decompressed-size``, uncompressed messages
under the header). The generator is model-aware: most requests name
the model's real inputs with near-right datatypes, shapes and element counts, so they reach
the engine's validation, the batcher and ONNX Runtime instead of stopping at the parser.

Every HTTP answer must be a 2xx or a clear 4xx with an ``error`` text (501 is allowed: it is
Triton's code for an unsupported feature, e.g. an unknown ``Content-Encoding``); every gRPC
error must carry a client-error status, never INTERNAL or UNKNOWN. The server must stay live
after each request and answer a valid request at the end. Bounded: ``max_examples`` per
test, no per-example deadline (a shared machine), about ten seconds in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import zlib
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app
from workbench.testing.grpc_wire import RawGrpcConnection, compress, frame, varint, zeros
from workbench.testing.models import build_datatype_repository, build_test_repository

HEADER = "Inference-Header-Content-Length"
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: model -> (max_batch_size, {input: (datatype, dims)}, outputs), as the test repository has them
MODELS = {
    "add_sub": (8, {"INPUT0": ("FP32", [16]), "INPUT1": ("FP32", [16])}, ["OUTPUT0", "OUTPUT1"]),
    "fixed_shape": (0, {"INPUT0": ("FP32", [2, 3])}, ["OUTPUT0"]),
    **{f"identity_{t.lower()}": (4, {"INPUT0": (t, [-1])}, ["OUTPUT0"])
       for t in ("FP32", "FP64", "FP16", "INT8", "INT32", "INT64", "UINT8", "UINT64", "BOOL", "BYTES")},
}
DATATYPES = ["FP32", "FP64", "FP16", "BF16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
             "UINT32", "UINT64", "BOOL", "BYTES", "fp32", "", "NOPE"]
NUMPY = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT8": np.int8,
         "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8,
         "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64, "BOOL": np.bool_}
WEIRD_DIMS = [0, 1, 2, 3, 16, 17, -1, -2, 2**31, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datatype_repository(build_test_repository(tmp_path_factory.mktemp("fuzz")))


@pytest_asyncio.fixture
async def engine(repository: Path):
    options = ServerOptions(model_repository=[str(repository)], http_max_input_size=1 << 20)
    async with Server(options) as server:
        yield server


def _add_sub_body() -> dict:
    return {"inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "FP32", "data": [1.5] * 16}
                       for i in range(2)]}


@pytest_asyncio.fixture
async def http(engine: Server):
    transport = httpx.ASGITransport(app=create_app(engine), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://fuzz") as client:
        yield client
        assert (await client.get("/v2/health/ready")).status_code == 200
        assert (await client.post("/v2/models/add_sub/infer", json=_add_sub_body())).status_code == 200


async def _still_serving(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    """The server is ready and answers a valid add_sub request."""
    assert (await stub.ServerReady(pb.ServerReadyRequest())).ready
    a = np.ones((1, 16), np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="add_sub", raw_input_contents=[a, a])
    for i in range(2):
        request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
    assert len((await stub.ModelInfer(request)).raw_output_contents) == 2


@pytest_asyncio.fixture
async def stub(engine: Server, stub_for):
    stub = await stub_for(engine)
    yield stub
    await _still_serving(stub)


# --------------------------------------------------------------------------- strategies
json_scalars = (st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=6)
                | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=8)


def _good_elements(datatype: str) -> st.SearchStrategy:
    if datatype in ("FP32", "FP64", "FP16"):
        return st.floats(-1e4, 1e4) | st.integers(-100, 100)
    if datatype == "BOOL":
        return st.booleans()
    if datatype == "BYTES":
        return st.text(max_size=5)
    if datatype.startswith("UINT"):
        return st.integers(0, 255) | st.sampled_from([2**64 - 1, 2**64, 2**32])
    if datatype.startswith("INT"):
        return st.integers(-128, 127) | st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**40])
    return json_scalars


@st.composite
def shapes(draw, max_batch_size: int, dims: list[int]) -> list[int]:
    """Mostly a right shape (a batch dim for batching models, -1 dims filled in), sometimes a
    near one (a dim changed or added), sometimes weird (huge, negative, zero and huge)."""
    item = [draw(st.integers(0, 4)) if d == -1 else d for d in dims]
    shape = ([draw(st.integers(0, max_batch_size + 1))] if max_batch_size else []) + item
    kind = draw(st.integers(0, 9))
    if kind in (6, 7) and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from(WEIRD_DIMS))
    elif kind == 8:
        shape = draw(st.lists(st.sampled_from(WEIRD_DIMS), max_size=4))
    elif kind == 9 and len(shape) > 1:  # an empty tensor with a huge dim
        shape[0], shape[-1] = 0, draw(st.sampled_from(WEIRD_DIMS[7:]))
    elif kind == 9:
        shape = [*shape, draw(st.integers(0, 3))]
    return shape


@st.composite
def tensor_plans(draw, model: str) -> list[dict]:
    """The inputs of one request: name, datatype, shape and elements (a list; the element
    count matches the shape unless perturbed)."""
    max_batch_size, inputs, _ = MODELS[model]
    names = list(inputs)
    kind = draw(st.integers(0, 9))
    if kind == 8:
        names = names[:-1]
    elif kind == 9:
        names = [*names, draw(st.sampled_from([names[0], "EXTRA", ""]))]
    plans = []
    for name in names:
        datatype, dims = inputs.get(name, ("FP32", [-1]))
        if draw(st.integers(0, 9)) == 0:
            datatype = draw(st.sampled_from(DATATYPES))
        shape = draw(shapes(max_batch_size, dims))
        count = math.prod(shape) if all(d >= 0 for d in shape) else 1
        count = min(count, 64) + draw(st.sampled_from([0] * 8 + [-1, 1]))
        elements = _good_elements(datatype) if draw(st.integers(0, 9)) else json_scalars
        plans.append({"name": name, "datatype": datatype, "shape": shape,
                      "elements": draw(st.lists(elements, min_size=max(count, 0), max_size=max(count, 0)))})
    return plans


def _raw_bytes(plan: dict) -> bytes:
    """The binary form of the plan's elements (Triton's encoding), or junk of about the right
    size when the elements do not fit the datatype."""
    values, datatype = plan["elements"], plan["datatype"]
    try:
        if datatype == "BYTES":
            array = np.array([str(v).encode() for v in values], dtype=object)
            return bytes(serialize_byte_tensor(array).item()) if values else b""
        with np.errstate(over="ignore", invalid="ignore"):  # e.g. 1e4 as FP16
            return np.array(values, dtype=NUMPY[datatype]).tobytes()
    except (KeyError, TypeError, ValueError, OverflowError):
        return bytes(range(len(values) % 256)) * 4


def _nested(values: list, shape: list[int]) -> list:
    """Nest a flat list to the shape (row-major) when it fits, else leave it flat."""
    if len(shape) < 2 or any(d <= 0 for d in shape) or math.prod(shape) != len(values):
        return values
    return np.array(values, dtype=object).reshape(shape).tolist()


@st.composite
def http_requests(draw) -> tuple[str, bytes, dict]:
    """(model, body, headers): a JSON or binary-extension infer request."""
    model = draw(st.sampled_from([*MODELS, "missing_model"]))
    plans = draw(tensor_plans(model if model in MODELS else "add_sub"))
    binary = draw(st.booleans())
    chunks, inputs = [], []
    for plan in plans:
        item = {"name": plan["name"], "datatype": plan["datatype"], "shape": plan["shape"]}
        if binary:
            chunk = _raw_bytes(plan)
            size = len(chunk) + draw(st.sampled_from([0] * 8 + [-1, 3]))
            item["parameters"] = {"binary_data_size": size}
            chunks.append(chunk)
        else:
            item["data"] = _nested(plan["elements"], plan["shape"]) if draw(st.booleans()) else plan["elements"]
        if draw(st.integers(0, 19)) == 0:
            item[draw(st.sampled_from(["name", "datatype", "shape", "data", "parameters"]))] = draw(json_values)
        inputs.append(item)
    header: dict = {"inputs": inputs}
    if draw(st.booleans()):
        header["id"] = draw(st.text(max_size=8) | json_values)
    if draw(st.booleans()):
        keys = st.sampled_from(["sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
                                "binary_data_output", "triton_x", "custom"])
        header["parameters"] = draw(st.dictionaries(keys, json_values, max_size=3))
    if draw(st.booleans()):
        outputs = MODELS.get(model, (0, {}, ["OUTPUT0"]))[2] + ["NOPE"]
        params = st.dictionaries(st.sampled_from(["binary_data", "classification", "shared_memory_region",
                                                  "shared_memory_byte_size", "x"]),
                                 st.booleans() | st.integers(-2, 3) | json_values, max_size=2)
        header["outputs"] = draw(st.lists(st.fixed_dictionaries(
            {"name": st.sampled_from(outputs)}, optional={"parameters": params}), max_size=3))
    head = json.dumps(header).encode()
    if not binary:
        return model, head, {}
    length = draw(st.sampled_from([str(len(head))] * 6 + ["0", "-3", "x", str(len(head) + 9), "1"]))
    return model, head + b"".join(chunks), {HEADER: length}


async def _post(http: httpx.AsyncClient, model: str, body: bytes, headers: dict) -> httpx.Response:
    response = await http.post(f"/v2/models/{model}/infer", content=body, headers=headers)
    assert response.status_code < 500 or response.status_code == 501, (
        f"{response.status_code} {response.text[:500]!r} for body {body[:400]!r} headers {headers}"
    )
    if response.status_code >= 400:
        assert response.json()["error"], response.text
    assert (await http.get("/v2/health/live")).status_code == 200
    return response


# --------------------------------------------------------------------------- HTTP
@FUZZ
@given(request=http_requests())
async def test_fuzz_http_infer_requests(http: httpx.AsyncClient, request) -> None:
    await _post(http, *request)


@FUZZ
@given(request=http_requests(), encoding=st.sampled_from(["gzip", "deflate", "identity", "br", "GZIP"]),
       corrupt=st.booleans(), accept=st.sampled_from(["gzip", "deflate", "*", "br;q=0", ""]))
async def test_fuzz_http_compressed_requests(
    http: httpx.AsyncClient, request, encoding: str, corrupt: bool, accept: str
) -> None:
    model, body, headers = request
    if encoding.lower() in ("gzip", "deflate"):
        wbits = zlib.MAX_WBITS | (16 if encoding.lower() == "gzip" else 0)
        compressor = zlib.compressobj(wbits=wbits)
        body = compressor.compress(body) + compressor.flush()
    if corrupt:
        body = body[: len(body) // 2] + b"\x00junk"
    await _post(http, model, body, {**headers, "Content-Encoding": encoding, "Accept-Encoding": accept})


VALID = json.dumps({
    "id": "v", "parameters": {"binary_data_output": False},
    "inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "FP32", "data": [1.5] * 16}
               for i in range(2)],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}],
}).encode()
edits = st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["set", "drop", "insert"]),
                           st.sampled_from(list(b'{}[]",:0123456789.eE+- tnf\\\x00\xff'))),
                 min_size=1, max_size=6)


def _mutate(data: bytes, changes: list) -> bytes:
    out = bytearray(data)
    for index, op, byte in changes:
        index %= max(1, len(out))
        if op == "set":
            out[index] = byte
        elif op == "drop" and out:
            del out[index]
        else:
            out.insert(index, byte)
    return bytes(out)


@FUZZ
@given(changes=edits)
async def test_fuzz_http_mutated_valid_body(http: httpx.AsyncClient, changes: list) -> None:
    await _post(http, "add_sub", _mutate(VALID, changes), {})


@FUZZ
@given(body=json_values | st.binary(max_size=64))
async def test_fuzz_http_arbitrary_bodies(http: httpx.AsyncClient, body) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    await _post(http, "identity_fp32", content, {})


# --------------------------------------------------------------------------- gRPC
CLIENT_CODES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED,
                grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED}
CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
            "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
            "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
            "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}
parameters = st.dictionaries(
    st.sampled_from(["sequence_id", "sequence_start", "priority", "timeout", "binary_data",
                     "classification", "shared_memory_region", "shared_memory_byte_size",
                     "triton_x", "triton_enable_empty_final_response", "custom"]),
    st.tuples(st.sampled_from(["bool_param", "int64_param", "string_param", "double_param",
                               "uint64_param", "none"]),
              st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.text(max_size=4)),
    max_size=2,
)


def _set_parameters(target, drawn: dict) -> None:
    for key, (choice, value) in drawn.items():
        parameter = target[key]
        try:
            if choice == "bool_param":
                parameter.bool_param = bool(value)
            elif choice in ("int64_param", "uint64_param"):
                number = value if isinstance(value, int) else len(str(value))
                setattr(parameter, choice, abs(number) if choice == "uint64_param" else number)
            elif choice == "double_param":
                parameter.double_param = float(len(str(value)))
            elif choice == "string_param":
                parameter.string_param = str(value)
        except ValueError:
            parameter.string_param = "x"


def _typed_values(plan: dict) -> tuple[str, list] | None:
    field = CONTENTS.get(plan["datatype"])
    if field is None:
        return None
    values = plan["elements"]
    try:
        if field == "bytes_contents":
            return field, [str(v).encode() for v in values]
        if field == "bool_contents":
            return field, [bool(v) for v in values]
        if field.startswith(("fp", "fp64")):
            return field, [float(v) for v in values]
        return field, [int(v) for v in values]
    except (TypeError, ValueError, OverflowError):
        return None


@st.composite
def grpc_requests(draw) -> pb.ModelInferRequest:
    model = draw(st.sampled_from([*MODELS, "missing_model"]))
    plans = draw(tensor_plans(model if model in MODELS else "add_sub"))
    request = pb.ModelInferRequest(model_name=model, id=draw(st.sampled_from(["", "id-1"])))
    raw = draw(st.booleans())
    for plan in plans:
        tensor = request.inputs.add(name=plan["name"], datatype=plan["datatype"])
        tensor.shape.extend(max(-(2**63), min(d, 2**63 - 1)) for d in plan["shape"])
        _set_parameters(tensor.parameters, draw(parameters) if draw(st.integers(0, 4)) == 0 else {})
        if raw:
            request.raw_input_contents.append(_raw_bytes(plan))
            continue
        typed = _typed_values(plan)
        if typed is not None:
            field, values = typed
            with contextlib.suppress(ValueError, TypeError):
                getattr(tensor.contents, field).extend(values)
            tensor.contents.SetInParent()
    if raw and draw(st.integers(0, 9)) == 0:
        request.raw_input_contents.append(b"\x00" * draw(st.integers(0, 8)))
    if draw(st.booleans()):
        for name in draw(st.lists(st.sampled_from(MODELS.get(model, (0, {}, ["OUTPUT0"]))[2] + ["NOPE"]),
                                  max_size=3)):
            output = request.outputs.add(name=name)
            _set_parameters(output.parameters, draw(parameters))
    _set_parameters(request.parameters, draw(parameters) if draw(st.booleans()) else {})
    return request


async def _infer_grpc(stub: service_pb2_grpc.GRPCInferenceServiceStub, request: pb.ModelInferRequest) -> None:
    try:
        await stub.ModelInfer(request)
    except grpc.aio.AioRpcError as error:
        assert error.code() in CLIENT_CODES, f"{error.code()} {error.details()!r} for {request}"
    assert (await stub.ServerLive(pb.ServerLiveRequest())).live


@FUZZ
@given(request=grpc_requests())
async def test_fuzz_grpc_infer_requests(stub, request: pb.ModelInferRequest) -> None:
    await _infer_grpc(stub, request)


def _valid_grpc() -> bytes:
    a = np.ones((1, 16), np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="add_sub", id="v", raw_input_contents=[a, a])
    for i in range(2):
        request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
    request.outputs.add(name="OUTPUT1").parameters["classification"].int64_param = 2
    return request.SerializeToString()


VALID_GRPC = _valid_grpc()


@FUZZ
@given(changes=edits)
async def test_fuzz_grpc_mutated_messages(stub, changes: list) -> None:
    """Byte-mutated valid messages; those protobuf can still parse are sent as messages."""
    from google.protobuf.message import DecodeError

    try:
        request = pb.ModelInferRequest.FromString(_mutate(VALID_GRPC, changes))
    except DecodeError:
        return
    await _infer_grpc(stub, request)


@pytest_asyncio.fixture
async def raw_model_infer(engine: Server):
    """``ModelInfer`` on a channel that sends bytes as they are (no serializer)."""
    from workbench.frontends.grpc import create_grpc_server

    grpc_server, port = create_grpc_server(engine, ServerOptions(grpc_address="127.0.0.1", grpc_port=0))
    await grpc_server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert (await stub.ServerReady(pb.ServerReadyRequest())).ready
    await grpc_server.stop(None)


@FUZZ
@given(raw=st.binary(max_size=64) | edits.map(lambda changes: _mutate(VALID_GRPC, changes)))
async def test_fuzz_grpc_raw_bytes(raw_model_infer, raw: bytes) -> None:
    """Random and mutated bytes, decodable or not, on the wire."""
    try:
        await raw_model_infer(raw)
    except grpc.aio.AioRpcError as error:
        assert error.code() in CLIENT_CODES, f"{error.code()} {error.details()!r} for {raw!r}"


# --------------------------------------------------------------------------- compressed gRPC
#: the fuzzed server's bound on an inflated message (bombs inflate to 1-3 MiB)
DECOMPRESSED_LIMIT = 1 << 20


@pytest_asyncio.fixture
async def compressed_port(engine: Server, grpc_serving):
    """The port of a gRPC server for the engine with a 1 MiB decompressed bound; after the test
    it still answers a valid request."""
    async with grpc_serving(engine, grpc_max_decompressed_size=DECOMPRESSED_LIMIT) as port:
        yield port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await _still_serving(service_pb2_grpc.GRPCInferenceServiceStub(channel))


def _bomb(inflated: int, encoding: str) -> bytes:
    """A compressed add_sub request whose raw input is ``inflated`` zero bytes."""
    head = pb.ModelInferRequest(model_name="add_sub").SerializeToString() + bytes([7 << 3 | 2]) + varint(inflated)
    return compress([head, *zeros(inflated)], encoding)


@st.composite
def compressed_calls(draw) -> tuple[bytes, str, bool]:
    """(message bytes, grpc-encoding, the message's compressed flag)."""
    encoding = draw(st.sampled_from(["gzip", "deflate"]))
    kind = draw(st.sampled_from(["request", "mutated", "truncated", "junk", "bomb", "plain"]))
    if kind == "bomb":
        return _bomb(draw(st.integers(DECOMPRESSED_LIMIT + 1, 3 * DECOMPRESSED_LIMIT)), encoding), encoding, True
    message = draw(grpc_requests()).SerializeToString() if draw(st.booleans()) else VALID_GRPC
    if kind == "plain":  # the header, an uncompressed message
        return message, encoding, False
    data = compress([message], encoding)
    if kind == "mutated":
        data = _mutate(data, draw(edits))
    elif kind == "truncated":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "junk":
        data += draw(st.binary(min_size=1, max_size=8))
    return data, encoding, True


def _raw_model_infer(port: int, data: bytes, encoding: str, compressed: bool):
    with RawGrpcConnection(port, timeout_s=30) as connection:
        return connection.call("/inference.GRPCInferenceService/ModelInfer", frame(data, compressed), encoding)


@FUZZ
@given(call=compressed_calls())
async def test_fuzz_grpc_compressed_messages(compressed_port: int, call: tuple[bytes, str, bool]) -> None:
    """Every answer is OK or a client-error status (RESOURCE_EXHAUSTED for a bomb), never
    INTERNAL or UNKNOWN."""
    data, encoding, compressed = call
    reply = await asyncio.to_thread(_raw_model_infer, compressed_port, data, encoding, compressed)
    codes = {code.value[0]: code for code in grpc.StatusCode}
    assert reply.status is not None, f"stream reset {reply.reset} for {call!r}"
    assert reply.status == 0 or codes[reply.status] in CLIENT_CODES, f"{codes[reply.status]} {reply.message!r}"
