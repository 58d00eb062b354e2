"""Python backend: a decoupled model's ``async def execute`` runs in the background (one
instance serves many requests at once, as Triton's stub), cancellation reaches the model
(``request.is_cancelled()``), and its neighbours. Real stubs, one shared server.

The models (``workbench/testing/python_models``): ``async_gate`` answers a request only once
COUNT executes of its GROUP have entered ``execute`` (a bound of TIMEOUT_S only keeps a broken
build from hanging: it then answers how many had entered, which the assertions see);
``async_gate_bls`` forwards to it with ``await async_exec(decoupled=True)``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, InternalError, Server, Tensor
from workbench.testing.python_backend import python_models_server
from workbench.testing.repeat_backend import collect_stream

pytestmark = pytest.mark.asyncio(loop_scope="module")

_GROUPS = itertools.count(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("python_async_models")
    async with python_models_server(repo, "async_gate", "async_gate_bls") as engine:
        yield engine


def gate_request(model: str, group: int, count: int) -> InferenceRequest:
    return InferenceRequest(model, [Tensor("GROUP", "INT32", np.array([group], np.int32)),
                                    Tensor("COUNT", "INT32", np.array([count], np.int32))])


def entered(responses) -> list[int]:
    return [int(t.data[0]) for r in responses for t in r.outputs]


@pytest.mark.parametrize("model", ["async_gate", "async_gate_bls"])
async def test_decoupled_async_execute_serves_requests_together(server: Server, model: str) -> None:
    """Three requests on one instance: each answers only once all three are inside ``execute``
    (awaited one after the other, each would see only itself). Through BLS too: iterating the
    iterator ``await async_exec(decoupled=True)`` returned does not hold up the loop."""
    group = next(_GROUPS)
    answers = await asyncio.gather(*(collect_stream(server, gate_request(model, group, 3)) for _ in range(3)))
    assert [entered(a) for a in answers] == [[3], [3], [3]]


async def test_an_exception_in_a_background_execute_fails_its_request_and_is_logged(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """The coroutine raises after the request entered: the request ends with the error (it was
    left open), the server log has the Python error (Triton logs it), and the instance serves on."""
    caplog.set_level(logging.ERROR, "workbench.backends.python.instance")
    with pytest.raises(InternalError, match="ValueError: COUNT cannot be negative: -1"):
        await collect_stream(server, gate_request("async_gate", next(_GROUPS), -1))
    assert "ValueError: COUNT cannot be negative: -1" in caplog.text
    assert entered(await collect_stream(server, gate_request("async_gate", next(_GROUPS), 1))) == [1]
