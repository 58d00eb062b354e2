"""Python backend: a decoupled model's ``async def execute`` runs in the background (one
instance serves many requests at once, as Triton's stub), cancellation reaches the model
(``request.is_cancelled()``), and its neighbours. Real stubs, one shared server.

The models (``workbench/testing/python_models``): ``async_gate`` answers a request only once
COUNT executes of its GROUP have entered ``execute`` (a bound of TIMEOUT_S only keeps a broken
build from hanging: it then answers how many had entered, which the assertions see);
``async_gate_bls`` forwards to it with ``await async_exec(decoupled=True)``;
``until_cancelled`` works up to MAX steps of 10 ms while ``request.is_cancelled()`` is False
and logs how it ended (``until_cancelled_stream``: its decoupled copy, one response a step);
``bls_cancel`` cancels its BLS stream of ``until_cancelled_stream`` (NVIDIA's
decoupled_bls_cancel); ``forker`` starts a fork ``multiprocessing.Pool`` whose workers try BLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import queue
import signal
from collections.abc import Iterator

import numpy as np
import psutil  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceRequest, InternalError, Server, Tensor
from workbench.testing.python_backend import copy_python_model, python_models_server
from workbench.testing.repeat_backend import collect_stream

pytestmark = pytest.mark.asyncio(loop_scope="module")

_GROUPS = itertools.count(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("python_async_models")
    copy_python_model(repo, "until_cancelled", "until_cancelled_stream",
                      extra="model_transaction_policy { decoupled: true }\n")
    async with python_models_server(repo, "async_gate", "async_gate_bls", "until_cancelled",
                                    "bls_cancel", "forker", "bls_iterate_again", "repeat") as engine:
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


# ----------------------------------------------------------------- cancellation
class _LogLines(logging.Handler):
    """The model's log lines that start with ``prefix``, read in order with :meth:`next`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.lines.put(record.getMessage())

    async def next(self, timeout_s: float = 60) -> str:
        """The next line (waits for it; the bound only stops a broken build from hanging)."""
        return await asyncio.to_thread(self.lines.get, True, timeout_s)


@contextlib.contextmanager
def model_log(prefix: str) -> Iterator[_LogLines]:
    lines = _LogLines(prefix)
    logger = logging.getLogger("workbench.python_model")
    logger.addHandler(lines)
    # setLevel, not an assignment to .level: only setLevel clears the cache of isEnabledFor, which
    # the server's model-log gate reads (an earlier test's cached False hid every line)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def steps(model: str, count: int) -> InferenceRequest:
    return InferenceRequest(model, [Tensor("MAX", "INT32", np.array([count], np.int32))])


async def test_a_closed_stream_cancels_the_decoupled_request_in_the_model(server: Server) -> None:
    """The consumer reads 3 of 500 responses and closes the stream: the model's
    ``request.is_cancelled()`` and ``response_sender.is_cancelled()`` turn True and it stops
    (it sent all 500 before: Triton stops after 3 of 60 in NVIDIA's case)."""
    with model_log("until_cancelled: ") as log:
        async with contextlib.aclosing(server.infer_stream(steps("until_cancelled_stream", 500))) as stream:
            for _ in range(3):
                await anext(stream)
        assert await log.next() == "until_cancelled: started"
        ended = await log.next()
    assert ended.startswith("until_cancelled: cancelled at step "), ended
    assert ended.endswith("(sender cancelled: True)")


async def test_a_cancelled_grpc_stream_cancels_the_request_in_the_model(server: Server, grpc_stub) -> None:
    with model_log("until_cancelled: ") as log:
        async with grpc_stub(server) as stub:
            call = stub.ModelStreamInfer()
            tensor = pb.ModelInferRequest.InferInputTensor(name="MAX", datatype="INT32", shape=[1])
            await call.write(pb.ModelInferRequest(model_name="until_cancelled_stream", inputs=[tensor],
                                                  raw_input_contents=[np.array([500], np.int32).tobytes()]))
            for _ in range(3):
                assert not (await call.read()).error_message
            call.cancel()
            ended = await log.next(), await log.next()
    assert ended[1].startswith("until_cancelled: cancelled at step "), ended


async def test_a_request_whose_caller_stops_waiting_is_cancelled_in_the_model(server: Server) -> None:
    """Non-decoupled: the task awaiting ``server.infer`` is cancelled (an HTTP client gone, a
    cancelled ModelInfer) while the model works: ``is_cancelled()`` turns True."""
    with model_log("until_cancelled: ") as log:
        task = asyncio.ensure_future(server.infer(steps("until_cancelled", 1000)))
        assert await log.next() == "until_cancelled: started"
        task.cancel()
        ended = await log.next()
    assert ended.startswith("until_cancelled: cancelled at step "), ended
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_bls_response_iterator_cancel_cancels_the_called_model(server: Server) -> None:
    """``ResponseIterator.cancel()`` cancels the BLS request; its responses go on to the called
    model's CANCELLED error (NVIDIA's decoupled_bls_cancel: it stopped reading at once before,
    and the called model ran all 500 steps)."""
    response = await server.infer(InferenceRequest(
        "bls_cancel", [Tensor("MAX_SUM", "INT32", np.array([10], np.int32))]))
    outputs = {t.name: t.data.tolist() for t in response.outputs}
    assert outputs["IS_CANCELLED"] == [True]
    assert 10 <= outputs["SUM"][0] < sum(range(500))


async def test_a_finished_bls_response_iterator_replays_its_responses(server: Server) -> None:
    """Triton's ``ResponseIterator``: once the final response was read, iterating again starts
    from the first response (every response is kept), ``next()`` past the end raises
    StopIteration, and a loop broken off resumes where it stopped (L0_backend_python bls
    ``test_response_iterator``). Before: a second loop over the finished iterator got nothing."""
    response = await server.infer(InferenceRequest(
        "bls_iterate_again", [Tensor("IN", "INT32", np.array([4, 5, 6, 7], np.int32))]))
    counts = response.outputs[0].data.tolist()
    total = counts[1]
    assert total >= 4, counts  # 4 responses (and a final empty one if 'repeat' sends it apart)
    assert counts == [total - 1, total, total, 1, total - 3]


async def test_an_uncancelled_request_runs_to_its_end(server: Server) -> None:
    with model_log("until_cancelled: ") as log:
        response = await server.infer(steps("until_cancelled", 3))
        assert [await log.next() for _ in range(2)] == ["until_cancelled: started",
                                                        "until_cancelled: finished 3 steps"]
    assert response.outputs[0].data.tolist() == [3]


# ----------------------------------------------------------------- forked workers
async def test_forked_workers_get_a_bls_error_obey_sigterm_and_end_with_the_stub(server: Server) -> None:
    """A model's fork Pool workers: BLS answers an error at once (it hung: the responses go to
    the stub's reader thread, which a fork does not copy), SIGTERM ends a worker (the stub's
    ignored SIGTERM was inherited) and the others end when the stub does (they outlived it)."""
    response = await server.infer(InferenceRequest("forker", [Tensor("COUNT", "INT32", np.array([2], np.int32))]))
    outputs = {t.name: t.data for t in response.outputs}
    assert outputs["BLS_ERROR"][0].decode().startswith("BLS and response senders are not available in a process forked")
    first, second = (psutil.Process(int(pid)) for pid in outputs["WORKER_PIDS"])
    first.send_signal(signal.SIGTERM)
    await asyncio.to_thread(first.wait, 30)  # psutil.TimeoutExpired before
    os.kill(int(outputs["STUB_PID"][0]), signal.SIGKILL)  # the stub goes away without a word
    await asyncio.to_thread(second.wait, 30)


async def test_model_log_turns_the_model_log_on_even_after_a_cached_answer() -> None:
    """``model_log`` set ``logger.level`` directly, which leaves Logger.isEnabledFor's cache as
    an earlier call filled it: after any code asked while the level was WARNING, the server's
    gate dropped every model line and the cancellation tests waited out their 60 s (seen in a
    full run: test_openai_routes' max_tokens test)."""
    logger = logging.getLogger("workbench.python_model")
    root = logging.getLogger()
    saved = root.level
    root.setLevel(logging.WARNING)
    try:
        logger.isEnabledFor(logging.INFO)  # fills the cache with False
        with model_log("x: "):
            assert logger.isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved)
