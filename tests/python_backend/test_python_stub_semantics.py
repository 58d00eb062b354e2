"""The stub runs a model.py as Triton's ``triton_python_backend_stub`` does (issue 33):
``sys.argv`` is ``['']`` (an embedded interpreter), model.py is imported as
``<version>.model`` with its folders on ``sys.path``, ``pb_utils.Logger`` lines obey the
server's log levels, ``pb_utils`` constructors refuse bad arguments inside the model, and
a model name with a character Triton refuses in a stub name fails to load.

One real server for the module; the models are written by the tests (Triton style).
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.common.errors import StatusCode, WorkbenchError
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
    # cause 2: every level, by the nested enum and by the exported values
    "logging_levels": """
class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        logger.log("info by value", logger.INFO)
        logger.log("warning by enum", logger.LogLevel.WARNING)
        logger.log("error by value", logger.ERROR)
        logger.log("verbose by value", logger.VERBOSE)
        logger.log_verbose("verbose by method")
        logger.log_info("info by method")
        return [respond({}) for _ in requests]
""",
    # cause 6: the constructors refuse bad arguments inside the stub, with Triton's types
    "argument_checks": """
def raised(call):
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None


class TritonPythonModel:
    def execute(self, requests):
        tensor = pb_utils.Tensor("INPUT0", np.zeros(1, np.float32))
        answer = {
            "request_none_input": raised(lambda: pb_utils.InferenceRequest(
                model_name="m", requested_output_names=[], inputs=[None])),
            "request_inputs_none": raised(lambda: pb_utils.InferenceRequest(
                model_name="m", requested_output_names=[], inputs=None)),
            "request_model_none": raised(lambda: pb_utils.InferenceRequest(
                model_name=None, requested_output_names=[], inputs=[tensor])),
            "response_none": raised(lambda: pb_utils.InferenceResponse(output_tensors=None)),
            "response_none_output": raised(lambda: pb_utils.InferenceResponse(output_tensors=[None])),
            "tensor_none_name": raised(lambda: pb_utils.Tensor(None, np.zeros(1))),
            "log_none_level": raised(lambda: pb_utils.Logger.log("m", None)),
            "log_int_level": raised(lambda: pb_utils.Logger.log("m", 1)),
            "parameters_float": raised(lambda: pb_utils.InferenceResponse(parameters={"f": 0.5})),
        }
        return [respond(answer) for _ in requests]
""",
    # cause 9: BLS with a bytes model name (python_backend's bls/sync_model.py example) and
    # refused in initialize with Triton's text
    "bls_rules": """
class TritonPythonModel:
    def initialize(self, args):
        try:
            pb_utils.InferenceRequest(model_name="relative_import", inputs=[], requested_output_names=[]).exec()
            self.in_initialize = None
        except pb_utils.TritonModelException as exc:
            self.in_initialize = exc.message()

    def execute(self, requests):
        responses = []
        for request in requests:
            name = np.array([b"relative_import"], dtype=np.object_)[0]  # bytes, as as_numpy() gives
            bls = pb_utils.InferenceRequest(model_name=name, inputs=request.inputs(),
                                            requested_output_names=[b"OUTPUT0"]).exec()
            if bls.has_error():
                raise pb_utils.TritonModelException(bls.error().message())
            called = json.loads(bls.output_tensors()[0].as_numpy()[0])
            answer = {"in_initialize": self.in_initialize, "bls_name": called["name"]}
            responses.append(respond(answer))
        return responses
""",
    # cause 9: the model's own is_ready() (Triton 2.67), sync and async, steered by files
    "readiness": """
import os


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def is_ready(self):
        if os.path.exists(os.path.join(self.folder, "raise")):
            raise RuntimeError("dependency down")
        if os.path.exists(os.path.join(self.folder, "non_bool")):
            return "yes"
        return not os.path.exists(os.path.join(self.folder, "not_ready"))

    def execute(self, requests):
        return [respond({}) for _ in requests]
""",
    "readiness_async": """
import asyncio
import os


class TritonPythonModel:
    def initialize(self, args):
        self.flag = os.path.join(args["model_repository"], "not_ready")

    async def is_ready(self):
        await asyncio.sleep(0)
        return not os.path.exists(self.flag)

    def execute(self, requests):
        return [respond({}) for _ in requests]
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


@pytest.mark.parametrize("root_level, expected", [
    (logging.INFO, ["info by value", "warning by enum", "error by value", "info by method"]),
    (logging.DEBUG, ["info by value", "warning by enum", "error by value", "verbose by value",
                     "verbose by method", "info by method"]),
], ids=["log-verbose=0", "log-verbose=1"])
async def test_logger_levels_exist_and_verbose_lines_obey_the_verbose_level(
        server: Server, caplog: pytest.LogCaptureFixture, root_level: int, expected: list[str]) -> None:
    """``--log-verbose`` sets the root logger to INFO (0) or DEBUG (>= 1) (hosts.logging_setup).
    Before: Logger.INFO did not exist (AttributeError), and verbose lines were always written."""
    caplog.set_level(logging.DEBUG)  # the capturing handler takes all, as the server's does
    logging.getLogger().setLevel(root_level)  # what --log-verbose sets (restored by caplog)
    await answer(server, "logging_levels")
    records = [r for r in caplog.records if r.name == "workbench.python_model"]
    assert [r.getMessage() for r in records] == expected
    assert {r.levelname for r in records if r.getMessage().startswith("warning")} == {"WARNING"}
    assert all(r.filename == "model.py" for r in records)


async def test_constructor_arguments_are_checked_in_the_model_with_tritons_types(server: Server) -> None:
    got = await answer(server, "argument_checks")
    assert {key: value[0] for key, value in got.items()} == {
        "request_none_input": "TritonModelException", "request_inputs_none": "TypeError",
        "request_model_none": "TypeError", "response_none": "TypeError",
        "response_none_output": "TritonModelException", "tensor_none_name": "TypeError",
        "log_none_level": "TypeError", "log_int_level": "TypeError",
        "parameters_float": "TritonModelException"}
    assert got["request_none_input"][1] == ("Input tensor for request with id '' and model name 'm' "
                                            "should not be empty.")
    assert got["response_none_output"][1] == "Output tensor for inference response should not be empty."
    assert got["parameters_float"][1] == ("Expect parameters values to have type bool/int/str, "
                                          "found type <class 'float'>")


IDENTITY = b"""import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())])
                for r in requests]
"""


async def test_model_names_with_characters_triton_refuses_fail_to_load_with_its_text(tmp_path: Path) -> None:
    """NVIDIA's model_control test_invalid_character_model_names / test_valid_model_names;
    before: 'model;test' loaded and served."""
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as engine:
        for name in ("model;test", "model`test`", "model\\test", "model'test'", "model!test"):
            config = {"name": name, "backend": "python", "max_batch_size": 4,
                      "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                      "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}
            with pytest.raises(WorkbenchError) as caught:
                await engine.load_model(name, json.dumps(config), {"1/model.py": IDENTITY})
            assert "Invalid stub name: contains invalid characters" in caught.value.message
            assert caught.value.code == StatusCode.INVALID_ARG
            assert not await engine.model_ready(name)
        config["name"] = "model-with_hyphens"
        await engine.load_model("model-with_hyphens", json.dumps(config), {"1/model.py": IDENTITY})
        assert await engine.model_ready("model-with_hyphens")


async def test_bls_takes_a_bytes_model_name_and_is_refused_in_initialize(server: Server) -> None:
    """Before: the BLS call failed with "unknown model: 'b'relative_import''" and BLS ran in
    initialize."""
    assert await answer(server, "bls_rules") == {
        "in_initialize": "BLS is only supported during the 'execute' function.", "bls_name": "1.model"}


async def test_bls_in_finalize_is_refused_with_tritons_text(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """NVIDIA's bls_finalize_error: finalize fails, and the server log carries the text."""
    (tmp_path / "bls_finalize" / "1").mkdir(parents=True)
    (tmp_path / "bls_finalize" / "config.pbtxt").write_text(CONFIG.format(name="bls_finalize"))
    (tmp_path / "bls_finalize" / "1" / "model.py").write_text(ANSWER + textwrap.dedent("""
        class TritonPythonModel:
            def execute(self, requests):
                return [respond({}) for _ in requests]

            def finalize(self):
                pb_utils.InferenceRequest(model_name="bls_finalize", inputs=[],
                                          requested_output_names=[]).exec()
        """))
    caplog.set_level(logging.ERROR)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])):
        pass
    assert any("BLS is only supported during the 'execute' function." in r.getMessage() for r in caplog.records)


async def test_execution_env_path_warns_that_conda_pack_is_not_supported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The model runs in the server's interpreter, with a warning; a missing archive fails
    the load as in Triton. Before: the parameter was ignored without a word."""
    for name, archive in (("packed", "$$TRITON_MODEL_DIRECTORY/env.tar.gz"), ("missing", "/nonexistent/env.tar.gz")):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG.format(name=name) + (
            f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{archive}" }} }}\n'))
        (tmp_path / name / "1" / "model.py").write_bytes(IDENTITY)
    (tmp_path / "packed" / "env.tar.gz").write_bytes(b"")
    caplog.set_level(logging.WARNING)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as engine:
        assert await engine.model_ready("packed") and not await engine.model_ready("missing")
    warnings = [r.getMessage() for r in caplog.records if "EXECUTION_ENV_PATH" in r.getMessage()]
    assert warnings == [f"model instance 'packed_0': EXECUTION_ENV_PATH '{tmp_path}/packed/env.tar.gz' is a "
                        "conda-pack execution environment, which this server does not support: the model "
                        f"runs in the server's Python ({sys.executable}) and its packages"]
    assert any("LastModifiedTime() failed as file '/nonexistent/env.tar.gz' does not exists." in r.getMessage()
               for r in caplog.records)


async def test_the_models_own_is_ready_decides_its_readiness(server: Server, repository: Path) -> None:
    """Triton 2.67: /v2/models/<m>/ready asks a model's is_ready() (sync or async); it raising
    or returning a non-bool reports not ready. Before: is_ready() was never called."""
    assert await server.model_ready("readiness") and await server.model_ready("readiness_async")
    for name in ("readiness", "readiness_async"):
        (repository / name / "not_ready").touch()
        assert not await server.model_ready(name)
        (repository / name / "not_ready").unlink()
        assert await server.model_ready(name)
    for trouble in ("raise", "non_bool"):
        (repository / "readiness" / trouble).touch()
        assert not await server.model_ready("readiness")
        (repository / "readiness" / trouble).unlink()
    assert await server.model_ready("readiness")
    assert (await answer(server, "readiness")) == {}  # it serves meanwhile


async def test_a_missing_model_py_fails_to_load_with_tritons_text(tmp_path: Path) -> None:
    """NVIDIA's L0_backend_python test.sh greps the server log for this text; before: "unable to
    load model 'missing', model file not found: ..."."""
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as engine:
        config = {"name": "missing", "backend": "python", "max_batch_size": 0,
                  "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                  "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}
        with pytest.raises(WorkbenchError) as caught:
            await engine.load_model("missing", json.dumps(config), {"1/helper.py": b"x = 1\n"})
    assert "Failed to preinitialize Python stub: Python model file not found in '" in caught.value.message
    assert "/1/model.py'" in caught.value.message


async def test_a_stub_killed_in_initialize_fails_the_load_with_tritons_text(tmp_path: Path) -> None:
    """NVIDIA's L0_backend_python init_exit model (SIGKILL in initialize): its test.sh greps the
    server log for "Stub process 'init_exit_0_0' is not healthy."; before: "failed to load
    model 'init_exit': stub process N ... was killed by signal 9 before initialize() finished"."""
    killer = b"import os, signal\n\nclass TritonPythonModel:\n    def initialize(self, args):\n" \
             b"        os.kill(os.getpid(), signal.SIGKILL)\n\n    def execute(self, requests):\n        pass\n"
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as engine:
        config = {"name": "init_exit", "backend": "python", "max_batch_size": 0,
                  "instance_group": [{"kind": "KIND_CPU", "count": 1}],
                  "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                  "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}
        with pytest.raises(WorkbenchError) as caught:
            await engine.load_model("init_exit", json.dumps(config), {"1/model.py": killer})
    assert "Stub process 'init_exit_0_0' is not healthy." in caught.value.message
