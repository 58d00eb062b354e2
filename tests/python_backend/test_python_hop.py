"""The Python backend's call link (``backends/python/hop.py``): one message per execution in a
shared-memory buffer per direction, woken by an eventfd.

A real stub process serves each test (the instance is driven directly, as the scheduler's
thread drives it); nothing is mocked.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from workbench.backends.base import BackendRequest, ExecutionTimes, InstanceSpec
from workbench.backends.python import hop
from workbench.backends.python.instance import PythonInstance
from workbench.backends.python.transport import SHM_DIR
from workbench.common.errors import InternalError
from workbench.config.model_config import parse_model_config
from workbench.testing.python_backend import python_backend_segments

CONFIG = """
name: "keeper"
backend: "python"
max_batch_size: 32
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "KEPT" data_type: TYPE_FP64 dims: [ 1 ] } ]
"""
MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Adds 1 to each input in place and keeps every input array it was given; KEPT is the
    sum of the first element of every kept array (they must keep their values)."""

    def initialize(self, args):
        self.kept = []

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            data += 1
            self.kept.append(data)
            kept = np.array([sum(float(k.flat[0]) for k in self.kept)])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data),
                                                         pb_utils.Tensor("KEPT", kept)]))
        return responses
'''


@pytest.fixture
def instance(tmp_path: Path):
    version = tmp_path / "keeper" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(MODEL)
    (version.parent / "config.pbtxt").write_text(CONFIG)
    loaded = PythonInstance(parse_model_config(CONFIG), version, InstanceSpec("keeper_0", "keeper", "KIND_CPU"), None)
    try:
        yield loaded
    finally:
        loaded.unload()
    assert python_backend_segments() == []


def _requests(values: list[float], width: int) -> list[BackendRequest]:
    return [BackendRequest({"INPUT0": np.full((1, width), value, np.float32)}, ["OUTPUT0", "KEPT"])
            for value in values]


def test_inputs_a_model_keeps_are_its_own_after_later_executions(instance: PythonInstance) -> None:
    """Each message's inline tensors are copied out of the link once, so an input the model
    keeps (and changed in place) is not overwritten by the next message, and requests of one
    batch do not share elements."""
    first = instance.execute(_requests([1.0, 2.0], 4), ExecutionTimes())
    assert [r.outputs["OUTPUT0"].tolist() for r in first] == [[[2.0] * 4], [[3.0] * 4]]
    second = instance.execute(_requests([10.0], 4), ExecutionTimes())
    assert second[0].outputs["OUTPUT0"].tolist() == [[11.0] * 4]
    # 2 + 3 kept from the first call, 11 from this one: the kept arrays were not overwritten
    assert second[0].outputs["KEPT"].tolist() == [16.0]
    # the first call's outputs, held here, are unchanged by the second message too
    assert [r.outputs["OUTPUT0"].tolist() for r in first] == [[[2.0] * 4], [[3.0] * 4]]


def test_a_batch_larger_than_the_link_buffers_grows_them(instance: PythonInstance) -> None:
    """Eight inline inputs of 120 KiB (under the 128 KiB inline limit) make a message of
    960 KiB, past the buffers' first size, both ways."""
    width = 120 * 1024 // 4
    assert 8 * width * 4 > hop.INITIAL_BYTES
    values = [float(v) for v in range(8)]
    for _ in range(2):  # grown once, then reused
        responses = instance.execute(_requests(values, width), ExecutionTimes())
        for value, response in zip(values, responses, strict=True):
            output = response.outputs["OUTPUT0"]
            assert output.shape == (1, width) and float(output.min()) == float(output.max()) == value + 1
    links = [name for name in python_backend_segments() if name.endswith(("_call", "_reply"))]
    assert len(links) == 2  # the call link's two buffers, grown in place
    assert all(os.stat(os.path.join(SHM_DIR, name)).st_size >= 8 * width * 4 for name in links)


def test_a_message_that_cannot_grow_its_buffer_fails_that_execution_only(
        instance: PythonInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full /dev/shm while the call buffer must grow (the server's side sees 512 KiB): that
    execution fails with Triton's "Failed to increase the shared memory pool size" text and
    the model serves the next one."""
    real = os.posix_fallocate

    def limited(fd: int, offset: int, length: int) -> None:
        if offset + length > 512 * 1024:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", limited)
    with pytest.raises(InternalError) as caught:
        instance.execute(_requests([float(v) for v in range(8)], 120 * 1024 // 4), ExecutionTimes())
    assert "Failed to increase the shared memory pool size to " in caught.value.message
    responses = instance.execute(_requests([5.0], 4), ExecutionTimes())
    assert responses[0].outputs["OUTPUT0"].tolist() == [[6.0] * 4]
