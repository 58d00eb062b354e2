"""The stub runs a model.py as Triton's ``triton_python_backend_stub`` does (issue 33):
``sys.argv`` is ``['']`` (an embedded interpreter), model.py is imported as
``<version>.model`` with its folders on ``sys.path``.

One real server for the module; the models are written by the tests (Triton style).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.python_backend import python_backend_segments

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = """name: "{name}"
backend: "python"
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] }} ]
"""

#: every model answers OUTPUT0 = [json.dumps(answer(self))]
ANSWER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def respond(answer):
    data = np.array([json.dumps(answer).encode()], dtype=np.object_)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)])
"""

MODELS = {
    # cause 1: NVIDIA's in-model unittest models and argparse with defaults
    "argv_model": """
import argparse
import sys
import unittest


class ArgvTest(unittest.TestCase):
    def test_argv_is_the_embedded_interpreters(self):
        self.assertEqual(sys.argv, [""])


class TritonPythonModel:
    def execute(self, requests):
        test = unittest.main("model", exit=False)
        parser = argparse.ArgumentParser()
        parser.add_argument("--size", type=int, default=7)
        answer = {"argv": sys.argv, "ok": test.result.wasSuccessful(), "run": test.result.testsRun,
                  "size": parser.parse_args().size}
        return [respond(answer) for _ in requests]
""",
    # cause 4: relative imports from the version folder (a package), plain imports too
    "relative_import": """
from . import helper
from .helper import triple
import helper as plain_helper


class TritonPythonModel:
    def execute(self, requests):
        answer = {"name": __name__, "package": __package__, "relative": triple(2),
                  "module": helper.triple(3), "plain": plain_helper.triple(4)}
        return [respond(answer) for _ in requests]
""",
}
HELPER = "def triple(value):\n    return value * 3\n"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("stub_semantics")
    for name, code in MODELS.items():
        version = repo / name / "1"
        version.mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (version / "model.py").write_text(ANSWER + textwrap.dedent(code))
    (repo / "relative_import" / "1" / "helper.py").write_text(HELPER)
    return repo


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(repository: Path):
    async with Server(ServerOptions(model_repository=[str(repository)], exit_on_error=False)) as engine:
        yield engine
    assert python_backend_segments() == []


async def answer(server: Server, model: str) -> dict:
    request = InferenceRequest(model, [Tensor("INPUT0", "FP32", np.zeros(1, np.float32))])
    response = await server.infer(request)
    return json.loads(response.outputs[0].data[0])


async def test_sys_argv_is_the_embedded_interpreters_so_unittest_main_and_argparse_work(server: Server) -> None:
    """Before: argv was the stub's command line (--fd N ...): SystemExit 2 in execute."""
    assert await answer(server, "argv_model") == {"argv": [""], "ok": True, "run": 1, "size": 7}


async def test_model_py_is_imported_as_version_dot_model_so_relative_imports_work(server: Server) -> None:
    """Before: model.py was module 'model' (no package): 'from . import helper' failed the load."""
    assert await answer(server, "relative_import") == {
        "name": "1.model", "package": "1", "relative": 6, "module": 9, "plain": 12}
