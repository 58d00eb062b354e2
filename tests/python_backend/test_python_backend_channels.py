"""The Python backend's two channels per stub (calls and events, ``backends/python/process.py``).

A call's reply travels on its own socket, read by the calling thread; the model's other
messages (log lines, response-sender sends, BLS) on the event socket, read by the reader
thread. What one socket guaranteed must still hold: everything the model sent before
``execute`` returned is handled before the request's response is.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.python_backend import python_backend_segments

pytestmark = pytest.mark.asyncio

CONFIG = """
name: "chatty"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            logger.log_info(f"executing {data.tolist()}")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
'''


class _SlowHandler(logging.Handler):
    """Holds each record for a moment before keeping it: a slow reader of the event channel."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self._pause = threading.Event()  # never set: wait() is a bounded pause

    def emit(self, record: logging.LogRecord) -> None:
        self._pause.wait(0.3)
        self.messages.append(record.getMessage())


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    folder = tmp_path / "chatty"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    (folder / "1" / "model.py").write_text(MODEL)
    return tmp_path


async def test_messages_sent_during_execute_are_handled_before_its_response(repository: Path) -> None:
    handler = _SlowHandler()
    model_log = logging.getLogger("workbench.python_model")
    model_log.addHandler(handler)
    old_level = model_log.level
    model_log.setLevel(logging.INFO)
    try:
        async with Server(ServerOptions(model_repository=[str(repository)], exit_on_error=False)) as server:
            for value in (1.0, 2.0):
                data = np.full(3, value, np.float32)
                response = await server.infer(InferenceRequest("chatty", [Tensor("INPUT0", "FP32", data)]))
                assert response.outputs[0].data.tolist() == data.tolist()
                # the log line went out before execute returned: it is handled already
                assert handler.messages[-1] == f"executing {data.tolist()}"
    finally:
        model_log.removeHandler(handler)
        model_log.setLevel(old_level)
    assert python_backend_segments() == []
