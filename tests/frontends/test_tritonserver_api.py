"""Triton's in-process Python API (``from workbench import tritonserver``) on the real engine.

The tutorial's code (triton-inference-server/tutorials, Triton_Inference_Server_Python_API:
create, start, list, load, infer, iterate the responses, stop) runs with only its import
changed, in a plain script and in a Jupyter kernel (whose own asyncio loop runs the cells);
then Triton's errors, tensors, the repository API and metrics, in this process.
"""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from tests.docs.test_notebooks import KERNEL_NAME, jupyter_path  # noqa: F401  (the kernel spec fixture)
from workbench import tritonserver
from workbench.tritonserver import ModelControlMode

ROOT = Path(__file__).resolve().parents[2]

#: the tutorial's "Hello World", on the sample models: one cell per entry
TUTORIAL_CELLS = [
    """\
    import json
    import sys

    import numpy
    from sklearn.datasets import load_digits

    from workbench import tritonserver

    repository = sys.argv[1] if len(sys.argv) > 1 else REPOSITORY
    server = tritonserver.Server(model_repository=repository,
                                 model_control_mode=tritonserver.ModelControlMode.EXPLICIT)
    server.start(wait_until_ready=True)
    """,
    """\
    model = server.load("digits_mlp")
    streamer = server.load("token_streamer")
    models = server.models()
    """,
    """\
    pixels, labels = load_digits(return_X_y=True)
    responses = model.infer(inputs={"pixels": pixels[:64].astype(numpy.float32)})
    for response in responses:
        logits = numpy.from_dlpack(response.outputs["logits"])
    accuracy = float((logits.argmax(axis=1) == labels[:64]).mean())
    """,
    """\
    tokens = []
    finals = []
    for response in streamer.infer(inputs={"TEXT": ["tokenizer"]}):
        finals.append(response.final)
        if "TOKEN" in response.outputs:
            tokens.append(response.outputs["TOKEN"].to_string_array().tolist())
    """,
    """\
    summary = {
        "ready": server.ready(),
        "models": sorted(f"{name}:{version}:{m.state}" for (name, version), m in models.items()
                         if name in ("digits_mlp", "token_streamer")),
        "accuracy": accuracy,
        "tokens": tokens,
        "finals": finals,
    }
    server.stop()
    print(json.dumps(summary))
    """,
]

EXPECTED_MODELS = ["digits_mlp:1:READY", "digits_mlp:2:READY", "token_streamer:1:READY"]


def check_summary(summary: dict) -> None:
    assert summary["ready"] is True
    assert summary["models"] == EXPECTED_MODELS
    assert summary["accuracy"] > 0.9  # the sample MLP's digits, classified
    assert summary["tokens"] == [["token"], ["##izer"]]  # one response per word piece ...
    assert summary["finals"] == [False, False, True]  # ... then the empty final one


def test_tutorial_runs_in_a_plain_script(sample_repository: Path, tmp_path: Path) -> None:
    script = tmp_path / "tutorial.py"
    script.write_text("\n".join(textwrap.dedent(cell) for cell in TUTORIAL_CELLS))
    done = subprocess.run([sys.executable, str(script), str(sample_repository)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    check_summary(json.loads(done.stdout.strip().splitlines()[-1]))


def test_tutorial_runs_in_a_kernel(jupyter_path: Path, sample_repository: Path,  # noqa: F811
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The same cells in an ipykernel (nbclient), plus ``async for`` over ``async_infer`` on
    the kernel's running loop: nothing may call ``asyncio.run`` or block that loop."""
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    cells = [f"REPOSITORY = {str(sample_repository)!r}\nimport sys; sys.argv = sys.argv[:1]",
             *(textwrap.dedent(cell) for cell in TUTORIAL_CELLS[:-1]),
             textwrap.dedent("""\
                 streamed = []
                 async for response in streamer.async_infer(inputs={"TEXT": ["token streamer"]}):
                     streamed.append(response.outputs["TOKEN"].to_string_array().tolist()
                                     if "TOKEN" in response.outputs else response.final)
                 """),
             textwrap.dedent(TUTORIAL_CELLS[-1]).replace('"finals": finals,',
                                                         '"finals": finals, "streamed": streamed,')]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=300, kernel_name=KERNEL_NAME).execute()
    last = notebook.cells[-1]
    summary = json.loads("".join(o.get("text", "") for o in last.outputs).strip().splitlines()[-1])
    check_summary(summary)
    assert summary["streamed"] == [["token"], ["stream"], ["##er"], True]


# ----------------------------------------------------------------- in this process
@pytest.fixture(scope="module")
def server(test_repository: Path) -> Iterator[tritonserver.Server]:
    server = tritonserver.Server(model_repository=str(test_repository),
                                 model_control_mode=ModelControlMode.EXPLICIT, startup_models=["add_sub"])
    server.start(wait_until_ready=True)
    yield server
    server.stop()


def add_sub_inputs() -> dict[str, np.ndarray]:
    return {"INPUT0": np.ones((2, 16), np.float32), "INPUT1": np.arange(32, dtype=np.float32).reshape(2, 16)}


def test_unknown_model_raises_tritons_error_and_text(server: tritonserver.Server) -> None:
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"^Request for unknown model: 'nope' is not found$"):
        server.model("nope").infer(inputs={"x": [1.0]})
    assert server.model("nope").ready() is False


def test_bad_input_is_refused_and_the_model_keeps_serving(server: tritonserver.Server) -> None:
    model = server.model("add_sub")
    with pytest.raises(tritonserver.InvalidArgumentError, match="unexpected shape for input 'INPUT0'"):
        model.infer(inputs={"INPUT0": np.ones((2, 3), np.float32), "INPUT1": np.ones((2, 3), np.float32)})
    with pytest.raises(tritonserver.InvalidArgumentError, match="not supported"):
        model.infer(inputs={"INPUT0": object()})
    [response] = list(model.infer(inputs=add_sub_inputs()))
    assert response.final and response.error is None
    assert np.asarray(response.outputs["OUTPUT0"]).tolist() == (add_sub_inputs()["INPUT0"]
                                                                 + add_sub_inputs()["INPUT1"]).tolist()


def test_gpu_memory_is_refused_clearly(server: tritonserver.Server) -> None:
    model = server.model("add_sub")
    with pytest.raises(tritonserver.UnsupportedError, match="host memory only"):
        model.infer(inputs=add_sub_inputs(), output_memory_type="gpu")
    [response] = model.infer(inputs=add_sub_inputs(), output_memory_type=tritonserver.MemoryType.CPU)
    with pytest.raises(tritonserver.UnsupportedError, match="host memory only"):
        response.outputs["OUTPUT0"].to_device((tritonserver.MemoryType.GPU, 0))


def test_tensors_are_dlpack_and_bytes_round_trip() -> None:
    tensor = tritonserver.Tensor.from_dlpack(np.arange(6, dtype=np.int64).reshape(2, 3))
    assert (tensor.data_type, list(tensor.shape), tensor.size) == (tritonserver.DataType.INT64, [2, 3], 48)
    assert tensor.__dlpack_device__() == (tritonserver.DLDeviceType.kDLCPU, 0)
    assert np.from_dlpack(tensor).tolist() == [[0, 1, 2], [3, 4, 5]]
    text = tritonserver.Tensor.from_string_array([["hello world!", "ü"]])
    assert text.data_type == tritonserver.DataType.BYTES
    assert text.size == 4 + 12 + 4 + 2  # Triton's serialized form: 4-byte length + UTF-8 per element
    assert text.to_string_array().tolist() == [["hello world!", "ü"]]
    assert text.to_bytes_array().tolist() == [[b"hello world!", "ü".encode()]]
    with pytest.raises(tritonserver.InvalidArgumentError, match="BYTES"):
        np.from_dlpack(text)
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"not DataType.BYTES|not 13"):
        tensor.to_bytes_array()


def test_not_started_and_started_twice(test_repository: Path, server: tritonserver.Server) -> None:
    idle = tritonserver.Server(model_repository=str(test_repository))
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"^Server not started$"):
        idle.models()
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"^Server already started$"):
        server.start()
    with pytest.raises(tritonserver.InvalidArgumentError, match="Model repository must be specified"):
        tritonserver.Server().start()


def test_models_load_unload_and_statistics(server: tritonserver.Server) -> None:
    models = server.models()
    assert models[("add_sub", 1)].state == "READY"
    assert models[("versioned", -1)].state is None  # in the repository, never loaded
    with pytest.raises(KeyError, match="Unknown Model"):
        models["nope"]
    versioned = server.load("versioned")
    assert versioned.ready() and versioned.config()["name"] == "versioned"
    assert versioned.metadata()["versions"] == ["1", "2", "3"]
    [response] = versioned.infer(inputs=add_sub_inputs())
    assert response.model.name == "versioned" and response.model.version == 3
    stats = versioned.statistics()["model_stats"]
    assert sum(row["inference_count"] for row in stats) == 2  # batch of 2
    server.unload("versioned", wait_until_unloaded=True)
    states = {key: m.state for key, m in server.models().items() if key[0] == "versioned"}
    assert states == {("versioned", 1): "UNAVAILABLE", ("versioned", 2): "UNAVAILABLE",
                      ("versioned", 3): "UNAVAILABLE"}
    with pytest.raises(tritonserver.NotFoundError,  # Triton's NOT_FOUND, its text
                       match=r"^Request for unknown model: 'versioned' has no available versions$"):
        versioned.infer(inputs=add_sub_inputs())


def test_metrics_and_metadata(server: tritonserver.Server) -> None:
    list(server.model("add_sub").infer(inputs=add_sub_inputs()))
    text = server.metrics()
    assert 'nv_inference_request_success{model="add_sub",version="1"}' in text
    assert server.metadata()["name"] == "triton" and "model_repository" in server.metadata()["extensions"]
    assert server.live() and server.ready()


def test_register_model_repository_with_a_name_mapping(server: tritonserver.Server, test_repository: Path,
                                                        tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    shutil.copytree(test_repository / "fixed_shape", extra / "folder")
    config = extra / "folder" / "config.pbtxt"  # the config names the model as it is served
    config.write_text(config.read_text().replace('name: "fixed_shape"', 'name: "renamed"'))
    server.register_model_repository(str(extra), {"folder": "renamed"})
    names = {name for name, _ in server.models()}
    assert "renamed" in names and "folder" not in names
    with pytest.raises(tritonserver.AlreadyExistsError, match="has already been registered"):
        server.register_model_repository(str(extra))
    model = server.load("renamed")
    [response] = model.infer(inputs={"INPUT0": np.ones((2, 3), np.float32)})
    assert response.model.name == "renamed"
    server.unregister_model_repository(str(extra))
    assert server.model("renamed").ready()  # loaded models stay loaded, as Triton's
    server.unload("renamed", wait_until_unloaded=True)
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"failed to unregister '.*', repository not found"):
        server.unregister_model_repository(str(extra))
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"failed to register '.*', repository not found"):
        server.register_model_repository(str(tmp_path / "missing"))


def test_repository_calls_follow_the_control_mode(test_repository: Path, tmp_path: Path) -> None:
    with tritonserver.Server(model_repository=str(test_repository), startup_models=[],
                             model_control_mode=ModelControlMode.POLL) as polled:
        polled.poll_model_repository()  # POLL mode: allowed
        with pytest.raises(tritonserver.UnsupportedError,
                           match=r"^repository registration is not allowed if model control mode is not EXPLICIT$"):
            polled.register_model_repository(str(tmp_path))
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        polled.models()  # stopped


def test_requests_objects_and_response_queues(server: tritonserver.Server) -> None:
    """An explicit ``InferenceRequest`` (Triton's ``create_request``) with a request id and a
    ``response_queue`` that receives each response too, sync and asyncio."""
    model = server.model("add_sub")
    responses: queue.SimpleQueue = queue.SimpleQueue()
    request = model.create_request(inputs=add_sub_inputs(), request_id="r-1", response_queue=responses)
    [response] = model.infer(request)
    assert response.request_id == "r-1" and responses.get_nowait().request_id == "r-1"

    async def stream() -> list[bool]:
        queued: asyncio.Queue = asyncio.Queue()
        finals = [r.final async for r in model.async_infer(inputs=add_sub_inputs(), response_queue=queued)]
        return [*finals, queued.get_nowait().final]

    assert asyncio.run(stream()) == [True, True]
