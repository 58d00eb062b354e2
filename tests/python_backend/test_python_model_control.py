"""Python backend: ``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready`` from a
model (python_backend's model loading API), with Triton's semantics and texts. Real stubs;
the ``model_control`` test model runs the call each request describes and answers what it
returned or raised.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.python_backend import PYTHON_MODELS, copy_python_model, python_backend_segments

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: the load of model_control loads add_sub from its initialize (Triton allows it there)
_ON_INITIALIZE = json.dumps([{"kind": "load", "model_name": "add_sub"},
                             {"kind": "ready", "model_name": "add_sub"}]).replace('"', '\\"')


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("model_control_models")
    copy_python_model(repo, "model_control", parameters={"ON_INITIALIZE": _ON_INITIALIZE})
    copy_python_model(repo, "add_sub")
    copy_python_model(repo, "identity")
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["model_control"], exit_on_error=False)
    async with Server(options) as engine:
        yield engine
    assert python_backend_segments() == [], "stub shared-memory segments left behind"


async def call(server: Server, kind: str, **arguments) -> dict:
    """Run one model-control call in model_control's execute; its answer."""
    text = json.dumps({"kind": kind, **arguments}).encode()
    request = InferenceRequest("model_control", [Tensor("CALL", "BYTES", np.array([text], dtype=np.object_))])
    response = await server.infer(request)
    return json.loads(response.outputs[0].data[0])


async def test_a_model_loads_and_unloads_another_and_sees_its_readiness(server: Server) -> None:
    await call(server, "unload", model_name="identity")
    assert (await call(server, "ready", model_name="identity"))["result"] is False
    assert (await call(server, "load", model_name="identity")) == {"result": None, "error": None, "initialize":
                                                                  [{"result": None, "error": None},
                                                                   {"result": True, "error": None}]}
    assert await server.model_ready("identity")
    assert (await call(server, "ready", model_name="identity", model_version="1"))["result"] is True
    assert (await call(server, "ready", model_name="identity", model_version="2"))["result"] is False
    # Triton's unload returns once started: the model has left service when it returns
    assert (await call(server, "unload", model_name="identity"))["error"] is None
    assert (await call(server, "ready", model_name="identity"))["result"] is False
    assert (await call(server, "ready", model_name="no_such_model"))["result"] is False


async def test_initialize_may_load_a_model_while_its_own_load_runs(server: Server) -> None:
    """The start-up load of model_control loaded add_sub from initialize (no deadlock)."""
    assert await server.model_ready("add_sub")
    answer = await call(server, "ready", model_name="add_sub")
    assert answer["initialize"] == [{"result": None, "error": None}, {"result": True, "error": None}]


async def test_config_and_file_overrides_as_the_repository_load_api(server: Server) -> None:
    model_py = (PYTHON_MODELS / "identity" / "1" / "model.py").read_text()
    answer = await call(server, "load", model_name="identity", config="", files={"file:1/model.py": model_py})
    assert answer["error"] == ("TritonModelException: Failed to load model: failed to load 'identity', failed to "
                               "poll from model repository: Load parameter 'config' must be specified for "
                               "model file override")
    identity = {"backend": "python", "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}
    answer = await call(server, "load", model_name="override_copy", config=json.dumps(identity),
                        files={"file:2/model.py": model_py})
    assert answer["error"] is None
    assert (await call(server, "ready", model_name="override_copy", model_version="2"))["result"] is True
    assert (await call(server, "ready", model_name="override_copy", model_version="1"))["result"] is False
    answer = await call(server, "load", model_name="override_copy", config=json.dumps(identity),
                        files={"1/model.py": model_py})
    assert answer["error"] == ("TritonModelException: Failed to load model: Unrecognized load parameter "
                               "'1/model.py' with type 'BYTES'")
    answer = await call(server, "load", model_name="add_sub", config='{"backend": {{')
    assert answer["error"].startswith("TritonModelException: Failed to load model: failed to load 'add_sub', "
                                      "failed to poll from model repository: Invalid config override: ")
    assert await server.model_ready("add_sub")  # a failed load leaves the model serving
    await call(server, "unload", model_name="override_copy")


async def test_arguments_are_checked_as_the_bindings_do(server: Server) -> None:
    answer = await call(server, "ready", model_name="add_sub", model_version="one")
    assert answer["error"] == ("TritonModelException: Failed to check model readiness: failed to get model "
                               "version from specified version string 'one' (details: stol), version should "
                               "be an integral value > 0")
    answer = await call(server, "ready", model_name="add_sub", model_version="-1")
    assert answer["error"].endswith("string '-1', version should be an integral value > 0")
    assert (await call(server, "load", model_name=None))["error"].startswith("TypeError: load_model(): ")
    assert (await call(server, "load", model_name="add_sub", files=["x"]))["error"] == (
        "TritonModelException: failed to load model 'add_sub', files should be a dictionary of file paths "
        "and file contents")
    assert (await call(server, "unload", model_name="add_sub", unload_dependents=None))["error"].startswith(
        "TypeError: unload_model(): ")


async def test_loads_and_unloads_need_explicit_model_control(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "model_control")
    copy_python_model(tmp_path, "add_sub")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as engine:
        refused = "explicit model load / unload is not allowed if polling is enabled"
        assert (await call(engine, "load", model_name="add_sub"))["error"] == \
            f"TritonModelException: Failed to load model: {refused}"
        assert (await call(engine, "unload", model_name="add_sub"))["error"] == \
            f"TritonModelException: Failed to unload model: {refused}"
        assert (await call(engine, "ready", model_name="add_sub"))["result"] is True
        assert await engine.model_ready("add_sub")


async def test_python_loads_do_not_hold_other_loads_behind_their_measurement(
        caplog: pytest.LogCaptureFixture) -> None:
    """A Python model's initialize that loads another model (above) waited 10 s for the load
    measurement its own load held, with a warning: loads are no longer measured one at a time
    (issue 33 L6, :mod:`workbench.engine.models.load_memory`), so what a load starts goes on at once."""
    import threading

    from workbench.engine.models.loader import measure_load

    measuring, finish = threading.Event(), threading.Event()

    def held() -> _Loaded:  # another load, being measured until told to finish
        measuring.set()
        finish.wait()
        return _Loaded()

    other = threading.Thread(target=measure_load, args=(held,))
    other.start()
    try:
        measuring.wait()
        loaded = _Loaded()
        instance, _ = measure_load(lambda: loaded)  # type: ignore[arg-type,return-value]
        assert instance is loaded  # type: ignore[comparison-overlap]
    finally:
        finish.set()
        other.join()
    assert "another model load has been measured" not in caplog.text

class _Loaded:
    def reported_memory(self) -> list:
        return []


async def test_stub_texts_name_the_model_instance_as_tritons_stub(tmp_path: Path) -> None:
    """Triton's stub is started with the instance's name and words its execute errors with it
    (L0_backend_python decoupled test_decoupled_return_response_error expects ``..._0_0``)."""
    from workbench.common.errors import WorkbenchError
    from workbench.testing.repeat_backend import collect_stream

    copy_python_model(tmp_path, "identity", "returns_responses",
                      extra="model_transaction_policy { decoupled: true }\n")
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as engine:
        request = InferenceRequest("returns_responses", [Tensor("INPUT0", "FP32", np.ones(4, np.float32))])
        with pytest.raises(WorkbenchError) as raised:
            await collect_stream(engine, request)
    assert ("Python model 'returns_responses_0_0' is using the decoupled mode and the execute function "
            "must return None.") in raised.value.message
