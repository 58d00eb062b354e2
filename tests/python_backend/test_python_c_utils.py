"""``import c_python_backend_utils`` works in a model (issue 33, L0_backend_python ``restart``):
Triton's stub module, with the classes ``pb_utils`` re-exports and ``shared_memory.free_memory()``.

One real server; the model is written by the test (as upstream's ``restart`` model uses it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Tensor
from workbench.testing.python_backend import python_models_server

pytestmark = pytest.mark.asyncio

CONFIG = """name: "c_utils_user"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

MODEL = """
import json

import c_python_backend_utils as c_utils
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answer = {
            "same_classes": all(getattr(c_utils, name) is getattr(pb_utils, name) for name in
                                ("Tensor", "InferenceRequest", "InferenceResponse", "TritonError",
                                 "TritonModelException", "Logger")),
            "free_memory": c_utils.shared_memory.free_memory(),
        }
        data = np.array([json.dumps(answer).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for _ in requests]
"""


async def test_a_model_importing_c_python_backend_utils_loads_and_reads_free_memory(tmp_path: Path) -> None:
    """Before: "No module named 'c_python_backend_utils'": the model did not load (restart's)."""
    (tmp_path / "c_utils_user" / "1").mkdir(parents=True)
    (tmp_path / "c_utils_user" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "c_utils_user" / "1" / "model.py").write_text(MODEL)
    async with python_models_server(tmp_path) as server:
        request = InferenceRequest("c_utils_user", [Tensor("INPUT0", "FP32", np.zeros(1, np.float32))])
        answer = json.loads((await server.infer(request)).outputs[0].data[0])
    # a fresh stub has sent no tensor through shared memory: no idle segment yet
    assert answer == {"same_classes": True, "free_memory": 0}
