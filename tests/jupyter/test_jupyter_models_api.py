"""Load, unload and reload through the extension's REST API (explicit mode, the default)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Tensor
from workbench.jupyter.host import EngineHost
from workbench.testing.reload import add_sub_config, atomic_write


def states(body: dict) -> dict[str, str]:
    return {row.get("version", ""): row["state"] for row in body["models"]}


async def test_unload_then_load(workbench: EngineHost, api) -> None:
    status, body = await api("models", "digits_mlp", "unload", method="POST")
    assert status == 200 and body["name"] == "digits_mlp"
    assert set(states(body).values()) == {"UNAVAILABLE"}
    assert not await workbench.engine().model_ready("digits_mlp")
    status, body = await api("models", "digits_mlp", "load", method="POST")
    assert status == 200 and states(body) == {"1": "READY", "2": "READY"}


async def test_load_with_a_config_override(workbench: EngineHost, api) -> None:
    config = {"name": "digits_mlp", "backend": "onnxruntime", "max_batch_size": 4,
              "version_policy": {"specific": {"versions": [1]}}}
    status, body = await api("models", "digits_mlp", "load", method="POST", body={"config": config})
    assert status == 200 and states(body) == {"1": "READY", "2": "UNAVAILABLE"}
    assert (await workbench.engine().model_config("digits_mlp")).max_batch_size == 4


async def test_reload_applies_the_file_on_disk(workbench: EngineHost, api, model_repository: Path) -> None:
    atomic_write(model_repository / "add_sub" / "config.pbtxt", add_sub_config("add_sub", 4, 1))
    status, body = await api("models", "add_sub", "reload", method="POST")
    assert status == 200 and states(body) == {"1": "READY"}
    assert (await workbench.engine().model_config("add_sub")).max_batch_size == 4
    ones = np.ones((1, 16), np.float32)
    response = await workbench.engine().infer(
        InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones), Tensor("INPUT1", "FP32", ones)]))
    assert response.outputs[0].data.tolist() == (ones * 2).tolist()


async def test_unknown_model_and_bad_requests_are_400(workbench: EngineHost, api) -> None:
    status, body = await api("models", "nope", "load", method="POST")
    assert status == 400 and body["reason"] == "INVALID_ARG" and "nope" in body["message"]
    status, body = await api("models", "add_sub", "unload", method="POST", params={"unload_dependents": "maybe"})
    assert status == 400 and "unload_dependents" in body["message"]
    status, body = await api("models", "add_sub", "load", method="POST", body={"config": 3})
    assert status == 400 and "'config'" in body["message"]


async def test_a_body_that_is_not_json_is_400(workbench: EngineHost, jp_fetch) -> None:
    from tornado.httpclient import HTTPClientError

    try:
        await jp_fetch("workbench", "api", "models", "add_sub", "load", method="POST", body="{nope")
    except HTTPClientError as exc:
        assert exc.code == 400 and exc.response is not None
        assert "not valid JSON" in json.loads(exc.response.body)["message"]
    else:
        raise AssertionError("a malformed body was accepted")
