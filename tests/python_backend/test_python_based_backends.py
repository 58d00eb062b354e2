"""Python-based backends (issue 33): ``--backend-directory`` holds ``<name>/model.py`` and
every model whose config says ``backend: "<name>"`` runs it in the Python backend, its own
version folders holding only what that backend reads (python_backend README "Python-based
Backends"; Triton core's backend library search).

One real server for the module; the backend and models are written by the tests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.hosts.server_flags import add_server_flags, options_from_args
from workbench.testing.python_backend import python_backend_segments

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: a backend whose models say in <version>/operation.json what to compute; its
#: auto_complete_config declares the inputs and output
BACKEND = '''
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        for name in ("A", "B"):
            config.add_input({"name": name, "data_type": "TYPE_FP32", "dims": [2]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
        return config

    def initialize(self, args):
        with open(os.path.join(pb_utils.get_model_dir(), "operation.json")) as file:
            self.operation = json.load(file)["operation"]
        self.version = args["model_version"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out = a + b if self.operation == "add" else a - b
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out * int(self.version))]))
        return responses
'''


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("python_based")
    backends, repo = root / "backends", root / "models"
    (backends / "arith").mkdir(parents=True)
    (backends / "arith" / "model.py").write_text(BACKEND)
    for name, operation, versions in (("adder", "add", (1, 2)), ("subtractor", "sub", (1,))):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            'backend: "arith"\nversion_policy: { all: {} }\n')
        for version in versions:
            (repo / name / str(version)).mkdir()
            (repo / name / str(version) / "operation.json").write_text(json.dumps({"operation": operation}))
    (repo / "orphan" / "1").mkdir(parents=True)
    (repo / "orphan" / "config.pbtxt").write_text('backend: "no_such_backend"\n')
    return backends, repo


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(folders: tuple[Path, Path]):
    backends, repo = folders
    options = ServerOptions(model_repository=[str(repo)], backend_directory=str(backends), exit_on_error=False)
    async with Server(options) as engine:
        yield engine
    assert python_backend_segments() == []


async def compute(server: Server, model: str, version: str = "") -> list[float]:
    a, b = np.array([5, 7], np.float32), np.array([1, 2], np.float32)
    request = InferenceRequest(model, [Tensor("A", "FP32", a), Tensor("B", "FP32", b)], model_version=version)
    return (await server.infer(request)).outputs[0].data.tolist()


async def test_models_naming_a_backend_of_the_backend_directory_run_its_model_py(server: Server) -> None:
    """Before: "unable to find backend library for backend 'arith'": the models did not load."""
    assert await compute(server, "adder", "1") == [6, 9]
    assert await compute(server, "adder", "2") == [12, 18]  # each version its own instance
    assert await compute(server, "subtractor") == [4, 5]


async def test_the_backends_auto_complete_fills_the_config_and_runtime_is_model_py(server: Server) -> None:
    config = await server.model_config("adder")
    assert config.runtime == "model.py"  # as Triton sets it for a Python-based backend
    assert [i.name for i in config.input] == ["A", "B"]
    assert [o.name for o in config.output] == ["OUT"]


async def test_a_backend_found_nowhere_fails_the_load_with_tritons_text(server: Server) -> None:
    index = {row["name"]: row for row in await server.repository_index()}
    assert index["orphan"]["state"] == "UNAVAILABLE"
    assert ("unable to find backend library for backend 'no_such_backend', try specifying runtime on the "
            "model configuration.") in index["orphan"]["reason"]


async def test_backend_directory_is_tritonservers_flag_with_its_default() -> None:
    parser = argparse.ArgumentParser()
    add_server_flags(parser)
    base = ["--model-repository", "/m"]
    assert options_from_args(parser.parse_args(base)).backend_directory == "/opt/tritonserver/backends"
    assert options_from_args(parser.parse_args([*base, "--backend-directory", "/b"])).backend_directory == "/b"
