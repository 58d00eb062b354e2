"""The Jupyter extension's REST API reads its bodies through the one body reader
(workbench/frontends/http/body_limits.py:received_body): a body over --http-max-input-size is
refused as the v2 load route refuses it (400, Triton's text), where the extension used to take
any body tornado took (Jupyter's max_body_size, 512 MiB)."""

from __future__ import annotations

import json

import pytest

from workbench.jupyter.host import EngineHost
from workbench.testing.reload import add_sub_config

LIMIT = 4096


@pytest.fixture
def workbench_config() -> dict:
    return {"server_options": {"http_max_input_size": LIMIT}}


async def test_a_body_over_the_input_size_is_refused_with_tritons_text(workbench: EngineHost, api) -> None:
    text = add_sub_config("add_sub", 8, 2)
    assert await api("models", "add_sub", "config", "validate", method="POST", body={"text": text}) == (
        200, {"problems": []})
    padded = text + "#" * LIMIT  # a comment: still a valid config, but the body is over the limit
    size = len(json.dumps({"text": padded}))  # the body the api fixture sends
    status, body = await api("models", "add_sub", "config", "validate", method="POST", body={"text": padded})
    assert (status, body) == (400, {
        "message": f"request JSON size of {size} bytes exceeds the maximum allowed input size of {LIMIT} "
                   "bytes. Use --http-max-input-size to increase the limit.",
        "reason": "INVALID_ARG"})
