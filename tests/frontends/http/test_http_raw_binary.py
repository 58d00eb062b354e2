"""Triton's raw binary request over HTTP (``Inference-Header-Content-Length: 0``: the whole
body is the single input of a one-input model, its shape deduced from the config)."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio
from onnx import TensorProto

from workbench import Server, ServerOptions
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, identity_graph, write_model

HEADER = "Inference-Header-Content-Length"
RAW = {HEADER: "0", "Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def raw_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("raw")
    write_model(repo, "ident_var", None, identity_graph(TensorProto.FLOAT, ["batch", "n"]))
    write_model(repo, "ident_two_var", None, identity_graph(TensorProto.FLOAT16, ["batch", "n", "m"]))
    write_model(repo, "ident_str1", None, identity_graph(TensorProto.STRING, ["batch", 1]))
    write_model(repo, "ident_str_var", None, identity_graph(TensorProto.STRING, ["batch", "n"]))
    write_model(repo, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    return repo


@pytest_asyncio.fixture
async def client(raw_repository: Path, asgi_client):
    async with Server(ServerOptions(model_repository=[str(raw_repository)])) as engine, asgi_client(engine) as http:
        yield http


def _binary_output(response: httpx.Response) -> bytes:
    assert response.status_code == 200, response.text
    return response.content[int(response.headers[HEADER]):]


@pytest.mark.parametrize("count", [8, 32])
async def test_raw_body_is_the_single_input_and_outputs_come_back_binary(client, count) -> None:
    data = np.arange(count, dtype=np.float32).tobytes()
    response = await client.post("/v2/models/ident_var/infer", content=data, headers=RAW)
    assert _binary_output(response) == data
    header = response.content[: int(response.headers[HEADER])]
    assert b'"shape":[1,%d]' % count in header


async def test_raw_bytes_input_is_one_string_element(client) -> None:
    response = await client.post("/v2/models/ident_str1/infer", content=b"427", headers=RAW)
    assert _binary_output(response) == (3).to_bytes(4, "little") + b"427"


@pytest.mark.parametrize(
    ("model", "text"),
    [
        ("ident_str_var", "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"),
        ("ident_two_var", "The shape of the raw input 'INPUT0' can not be deduced because there are "
                          "more than one variable-sized dimension"),
        ("add_sub", "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
                    "in 'add_sub' model configuration"),
    ],
)
async def test_raw_request_the_model_cannot_take_is_a_400_with_tritons_text(client, model, text) -> None:
    response = await client.post(f"/v2/models/{model}/infer", content=b"\0" * 8, headers=RAW)
    assert response.status_code == 400
    assert text in response.json()["error"]


async def test_raw_request_for_an_unknown_model_is_404(client) -> None:
    response = await client.post("/v2/models/nope/infer", content=b"\0" * 8, headers=RAW)
    assert response.status_code == 404


@pytest.mark.parametrize("length", ["-1", "99"])
async def test_header_length_out_of_range_uses_tritons_text(client, length) -> None:
    response = await client.post("/v2/models/ident_var/infer", content=b"{}", headers={HEADER: length})
    assert response.status_code == 400
    assert response.json()["error"] == f"inference header size should be in range (0, 2), got: {length}"
