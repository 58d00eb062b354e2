"""Model file overrides of the load API (Triton's ``file:<version>/<name>`` load parameters):
the path rules, the temporary model folder's lifetime, the engine, HTTP and gRPC."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.common.errors import InternalError
from workbench.config.model_config import model_config_from_json, parse_model_config
from workbench.repository.overrides import (
    OverrideStore,
    check_override_files,
    override_path,
    write_override_files,
)
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend

ONNX_CONFIG = json.dumps({"backend": "onnxruntime"})  # what Triton's own lifecycle test sends


@pytest.fixture(scope="module")
def add_sub_onnx(test_repository: Path) -> bytes:
    return (test_repository / "add_sub" / "1" / "model.onnx").read_bytes()


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: relative path -> (size, mtime_ns)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def explicit(repo: Path) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit"))


async def add_sub_infer(server: Server, model: str) -> tuple[np.ndarray, str]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    response = await server.infer(InferenceRequest(
        model, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", np.ones_like(a))]))
    return response.outputs[0].data, response.model_version


# ----------------------------------------------------------------- path rules
@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../x", "'.' and '..' are not allowed"),
        ("1/../../x", "'.' and '..' are not allowed"),
        ("..", "'.' and '..' are not allowed"),
        ("1/./model.onnx", "'.' and '..' are not allowed"),
        ("./1/model.onnx", "'.' and '..' are not allowed"),
        ("/etc/passwd", "a model file must be in a version folder"),
        ("//etc/passwd", "empty path components"),
        ("1\\model.onnx", "backslashes"),
        ("..\\..\\x", "backslashes"),
        ("1/model\0.onnx", "NUL"),
        ("", "the file name is empty"),
        ("/", "the file name is empty"),
        ("1//model.onnx", "empty path components"),
        ("1/", "empty path components"),
        ("models/1/model.onnx", "a model file must be in a version folder"),
        ("01/model.onnx", "a model file must be in a version folder"),
    ],
)
def test_invalid_paths_are_refused(path: str, why: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        override_path(path)
    assert error.value.message.startswith(f"Invalid file parameter 'file:{path}': ")
    assert why in error.value.message


def test_a_component_past_name_max_is_an_internal_error() -> None:
    """Triton answers a component the file system cannot create with INTERNAL (its own
    clients check it: simple_grpc_model_control, L0_http test_load_oversized_file_parameter)."""
    path = "1/" + "A" * 256
    with pytest.raises(InternalError) as error:
        override_path(path)
    assert not isinstance(error.value, InvalidArgument)
    assert error.value.message == f"Invalid file parameter 'file:{path}': a path component is longer than 255 bytes"


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("1/model.onnx", ("1", "model.onnx")),
        ("/1/model.py", ("1", "model.py")),  # Triton joins a leading '/' under the model folder
        ("0/model.onnx", ("0", "model.onnx")),
        ("12/sub/dir/data.bin", ("12", "sub", "dir", "data.bin")),
        ("labels.txt", ("labels.txt",)),  # a label_filename file at the model's root
        ("warmup/raw_input", ("warmup", "raw_input")),
        ("initial_state/state0", ("initial_state", "state0")),
    ],
)
def test_valid_paths(path: str, parts: tuple[str, ...]) -> None:
    assert override_path(path) == parts


def test_duplicates_and_file_folder_clashes_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="the file '1/a' is given twice"):
        check_override_files({"1/a": b"x", "/1/a": b"y"})
    with pytest.raises(InvalidArgument, match="'file:1/a': it is also the folder of another"):
        check_override_files({"1/a": b"x", "1/a/b": b"y"})
    with pytest.raises(InvalidArgument, match="must have bytes type"):
        check_override_files({"1/a": "text"})  # type: ignore[dict-item]


def test_writing_never_follows_a_symlink(tmp_path: Path) -> None:
    root, outside = tmp_path / "model", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "1").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidArgument, match="'1' is a symlink or not a folder"):
        write_override_files(root, {("1", "model.onnx"): b"evil"})
    (root / "2").mkdir()
    (outside / "victim").write_bytes(b"safe")
    (root / "2" / "model.onnx").symlink_to(outside / "victim")
    with pytest.raises(InvalidArgument, match="the path exists already"):
        write_override_files(root, {("2", "model.onnx"): b"evil"})
    (root / "warmup").symlink_to(outside / "victim")  # a symlink to a file, used as a folder
    with pytest.raises(InvalidArgument, match="'warmup' is a symlink or not a folder"):
        write_override_files(root, {("warmup", "raw"): b"evil"})
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_bytes() == b"safe"


def test_store_writes_the_config_and_cleans_up(tmp_path: Path) -> None:
    store = OverrideStore()
    config = model_config_from_json('{"backend": "onnxruntime", "max_batch_size": 2}')
    directory = store.create("m", config, {"1/model.onnx": b"onnx", "config.pbtxt": b"ignored"})
    assert store.root is not None and directory.path.parent == store.root
    assert oct(store.root.stat().st_mode & 0o777) == "0o700"
    assert snapshot(directory.path).keys() == {"1", "1/model.onnx", "config.pbtxt"}
    assert parse_model_config((directory.path / "config.pbtxt").read_text()) == config
    with pytest.raises(InvalidArgument):
        store.create("m", config, {"1/model.onnx": b"x", "../escape": b"x"})
    assert store.live() == [directory] and sorted(store.root.iterdir()) == [directory.path]
    directory.remove()
    directory.remove()  # idempotent
    assert not directory.path.exists() and store.live() == []
    root = store.root
    store.close()
    assert not root.exists() and store.root is None


# ----------------------------------------------------------------- engine
async def test_load_from_files_ignores_and_keeps_the_repository(
    test_repository: Path, add_sub_onnx: bytes
) -> None:
    before = snapshot(test_repository)
    async with explicit(test_repository) as server:
        await server.load_model("add_sub")
        assert (await add_sub_infer(server, "add_sub"))[1] == "1"
        # version 2 only: the override folder replaces the repository's, version 1 included
        await server.load_model("add_sub", ONNX_CONFIG, {"2/model.onnx": add_sub_onnx})
        output, version = await add_sub_infer(server, "add_sub")
        assert version == "2" and output[0, 3] == 4.0
        rows = [r for r in await server.repository_index() if r["name"] == "add_sub"]
        # version 1 left service, drained and unloaded; listed "unloaded" as Triton keeps it
        assert [(r["version"], r["state"], r.get("reason")) for r in rows] == [
            ("1", "UNAVAILABLE", "unloaded"), ("2", "READY", None)]
        config = await server.model_config("add_sub")
        assert config.max_batch_size == 4  # auto-completed from the ONNX file, not config.pbtxt's 8
        [directory] = server.repository_manager.overrides.live()
        assert snapshot(directory.path).keys() == {"2", "2/model.onnx", "config.pbtxt"}
        await server.load_model("add_sub")  # a plain load goes back to the repository
        assert (await add_sub_infer(server, "add_sub"))[1] == "1"
        assert server.repository_manager.overrides.live() == [] and not directory.path.exists()
    assert snapshot(test_repository) == before


async def test_a_model_absent_from_the_repository(test_repository: Path, add_sub_onnx: bytes) -> None:
    async with explicit(test_repository) as server:
        await server.load_model("brand_new", ONNX_CONFIG, {"/1/model.onnx": add_sub_onnx})
        assert (await add_sub_infer(server, "brand_new"))[1] == "1"
        rows = {r["name"]: r for r in await server.repository_index()}
        assert rows["brand_new"] == {"name": "brand_new", "version": "1", "state": "READY"}
        await server.unload_model("brand_new")
        assert server.repository_manager.overrides.live() == []
        rows = {r["name"]: r for r in await server.repository_index()}
        assert rows["brand_new"]["state"] == "UNAVAILABLE"
        with pytest.raises(InvalidArgument, match="failed to poll from model repository"):
            await server.load_model("brand_new")  # its files are gone with it


async def test_temporary_folders_never_leak(test_repository: Path, add_sub_onnx: bytes) -> None:
    files = {"1/model.onnx": add_sub_onnx}
    async with explicit(test_repository) as server:
        store = server.repository_manager.overrides
        await server.load_model("a", ONNX_CONFIG, files)
        [first] = store.live()
        await server.load_model("a", ONNX_CONFIG, files)  # reload: the old folder goes
        [second] = store.live()
        assert second.path != first.path and not first.path.exists()
        with pytest.raises(InvalidArgument, match="load failed for model 'a'"):
            await server.load_model("a", ONNX_CONFIG, {"1/model.onnx": b"not onnx"})
        assert store.live() == [second]  # the failed reload's folder is gone, the old one serves
        with pytest.raises(InvalidArgument, match="load failed for model 'b'"):
            await server.load_model("b", ONNX_CONFIG, {"1/model.onnx": b"not onnx"})
        assert store.live() == [second]  # nothing loaded: removed at once
        await server.load_model("c", ONNX_CONFIG, files)
        assert len(store.live()) == 2
        root = store.root
        assert root is not None
        assert sorted(root.iterdir()) == sorted(d.path for d in store.live())
    assert not root.exists()  # server stop removes every folder


async def test_files_need_a_config_and_valid_paths(test_repository: Path) -> None:
    async with explicit(test_repository) as server:
        with pytest.raises(InvalidArgument) as error:
            await server.load_model("add_sub", None, {"1/model.onnx": b"x"})
        assert error.value.message == (
            "failed to load 'add_sub', failed to poll from model repository: "
            "Load parameter 'config' must be specified for model file override")
        for path in ("../x", "1/../../x", "/etc/passwd", "1/./model.onnx", "..\\x"):
            with pytest.raises(InvalidArgument) as error:
                await server.load_model("add_sub", ONNX_CONFIG, {"1/model.onnx": b"x", path: b"x"})
            assert error.value.message.startswith(
                "failed to load 'add_sub', failed to poll from model repository: Invalid file "
                f"parameter 'file:{path}': ")
        assert server.repository_manager.overrides.live() == []
        root = server.repository_manager.overrides.root
        assert root is None or list(root.iterdir()) == []
        assert "add_sub" not in server.lifecycle.models  # nothing was loaded


async def test_override_folder_serves_labels_and_warmup_files(test_repository: Path) -> None:
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    config = {
        "backend": "fake", "max_batch_size": 2,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1],
                    "label_filename": "labels.txt"}],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "model_warmup": [{"name": "w", "batch_size": 1, "inputs": {"INPUT0": {
            "data_type": "TYPE_FP32", "dims": [1], "input_data_file": "raw"}}}],
    }
    files = {"1/.keep": b"", "warmup/raw": np.float32(7.5).tobytes(), "labels.txt": b"seven\n"}
    async with explicit(test_repository) as server:
        await server.load_model("faked", json.dumps(config), files)
        assert BEHAVIOUR.batches == [[7.5]]  # the warmup file came from the override folder
        loaded = server.lifecycle.models["faked"].latest_ready
        assert loaded is not None and loaded.labels == {"OUTPUT0": ["seven"]}
    BEHAVIOUR.reset()


# ----------------------------------------------------------------- HTTP and gRPC
async def test_http_load_with_base64_files(test_repository: Path, add_sub_onnx: bytes, asgi_client) -> None:
    async with explicit(test_repository) as server, asgi_client(server) as http:
        encoded = base64.b64encode(add_sub_onnx).decode()
        body = {"parameters": {"config": ONNX_CONFIG, "file:1/model.onnx": encoded}}
        response = await http.post("/v2/repository/models/from_http/load", json=body)
        assert response.status_code == 200, response.text
        a = np.ones((1, 16), np.float32).tolist()
        infer = {"inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "FP32", "data": a}
                            for i in range(2)]}
        reply = await http.post("/v2/models/from_http/infer", json=infer)
        assert reply.json()["outputs"][0]["data"][:2] == [2.0, 2.0]
        cases = [
            ({"file:1/model.onnx": encoded},
             "failed to load 'from_http', failed to poll from model repository: "
             "Load parameter 'config' must be specified for model file override"),
            ({"config": ONNX_CONFIG, "file:../x": encoded},
             "failed to load 'from_http', failed to poll from model repository: "
             "Invalid file parameter 'file:../x': '.' and '..' are not allowed"),
            ({"config": ONNX_CONFIG, "file:1/model.onnx": 12},
             "File parameter 'file:1/model.onnx' must have a base64-encoded string for its value"),
            ({"config": ONNX_CONFIG, "file:1/model.onnx": "abc"},
             "Unable to decode file parameter 'file:1/model.onnx' as base64"),
            ({"config": {"backend": "onnxruntime"}, "file:1/model.onnx": encoded},
             "Config parameter 'config' must have string type for its value"),
        ]
        for params, message in cases:
            error = await http.post("/v2/repository/models/from_http/load", json={"parameters": params})
            assert error.status_code == 400
            assert error.json()["error"].startswith(message)
        assert len(server.repository_manager.overrides.live()) == 1  # the first load's folder only


async def test_http_load_body_is_bounded_by_max_input_size(test_repository: Path, asgi_client) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], model_control_mode="explicit",
                            http_max_input_size=1000)
    async with Server(options) as server, asgi_client(server) as http:
        body = {"parameters": {"config": ONNX_CONFIG, "file:1/model.onnx": "A" * 2000}}
        error = await http.post("/v2/repository/models/big/load", json=body)
        assert error.status_code == 400
        assert error.json()["error"].startswith("request JSON size of ")
        assert error.json()["error"].endswith(" bytes exceeds the maximum allowed input size of 1000 "
                                              "bytes. Use --http-max-input-size to increase the limit.")
        assert server.repository_manager.overrides.live() == []


async def test_grpc_load_with_bytes_params(test_repository: Path, add_sub_onnx: bytes, stub_for) -> None:
    async with explicit(test_repository) as server:
        stub = await stub_for(server)
        config = pb.ModelRepositoryParameter(string_param=ONNX_CONFIG)
        params = {"config": config, "file:1/model.onnx": pb.ModelRepositoryParameter(bytes_param=add_sub_onnx)}
        await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="from_grpc", parameters=params))
        ready = await stub.ModelReady(pb.ModelReadyRequest(name="from_grpc", version="1"))
        assert ready.ready
        cases = [
            ({"config": config, "file:1/model.onnx": pb.ModelRepositoryParameter(string_param="x")},
             "invalid value type for load parameter 'file:1/model.onnx', expected bytes_param."),
            ({"config": config, "file:/etc/passwd": pb.ModelRepositoryParameter(bytes_param=b"x")},
             "failed to load 'from_grpc', failed to poll from model repository: Invalid file "
             "parameter 'file:/etc/passwd': a model file must be in a version folder"),
            ({"file:1/model.onnx": pb.ModelRepositoryParameter(bytes_param=b"x")},
             "failed to load 'from_grpc', failed to poll from model repository: "
             "Load parameter 'config' must be specified for model file override"),
        ]
        for bad, message in cases:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="from_grpc", parameters=bad))
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.value.details().startswith(message)
        assert (await stub.ModelReady(pb.ModelReadyRequest(name="from_grpc"))).ready
        await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="from_grpc"))
        assert server.repository_manager.overrides.live() == []


def test_no_file_is_written_outside(tmp_path: Path) -> None:
    """Every traversal attempt, through the store: nothing appears next to the root."""
    store = OverrideStore()
    config = model_config_from_json(ONNX_CONFIG)
    for path in ("../x", "1/../../x", "/etc/passwd", "1/./x", "..\\x", "/../x"):
        with pytest.raises(InvalidArgument):
            store.create("m", config, {path: b"evil"})
    assert store.root is None or list(store.root.iterdir()) == []  # refused before any folder
    store.close()


async def test_python_model_from_files_with_a_leading_slash(test_repository: Path) -> None:
    """Triton's L0_backend_python model_control test: a Python model sent as
    ``file:/1/model.py`` (the leading '/' is the model folder's root) with a JSON config."""
    import workbench.testing

    models = Path(workbench.testing.__file__).parent / "python_models"
    source = (models / "identity" / "1" / "model.py").read_bytes()
    config = {
        "name": "py_identity", "backend": "python", "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    }
    async with explicit(test_repository) as server:
        await server.load_model("py_identity", json.dumps(config), {"/1/model.py": source})
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        response = await server.infer(InferenceRequest(
            "py_identity", [Tensor("INPUT0", "FP32", data)]))
        np.testing.assert_array_equal(response.outputs[0].data, data)
        [directory] = server.repository_manager.overrides.live()
        await server.unload_model("py_identity")  # the stub is gone before its folder is
        assert not directory.path.exists()


async def test_oversized_file_parameter_is_500_and_internal_as_triton(
        test_repository: Path, asgi_client, stub_for) -> None:
    long_name = "file:" + "A" * 256
    async with explicit(test_repository) as server:
        with pytest.raises(InternalError) as error:
            await server.load_model("add_sub", "{}", {long_name[5:]: b"a"})
        assert error.value.message.startswith(
            "failed to load 'add_sub', failed to poll from model repository: Invalid file parameter ")
        async with asgi_client(server) as http:
            body = {"parameters": {long_name: "YQ==", "config": "{}"}}
            response = await http.post("/v2/repository/models/add_sub/load", json=body)
            assert response.status_code == 500
            assert "failed to poll from model repository" in response.json()["error"]
            assert (await http.get("/v2/health/live")).status_code == 200
        stub = await stub_for(server)
        params = {"config": pb.ModelRepositoryParameter(string_param="{}"),
                  long_name: pb.ModelRepositoryParameter(bytes_param=b"a")}
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="add_sub", parameters=params))
        assert rpc.value.code() == grpc.StatusCode.INTERNAL
        assert "failed to poll from model repository" in rpc.value.details()
        assert server.repository_manager.overrides.live() == []


# ----------------------------------------------------------------- config override errors
BAD_CONFIGS = [
    '"parameters": {"config": {{"max_batch_size": "16"}}}',  # Triton's model-control clients
    '{"no_such_field": 1}',
    "[1, 2]",
]


@pytest.mark.parametrize("config", BAD_CONFIGS)
async def test_a_bad_config_override_fails_the_load_with_triton_prefix(
        test_repository: Path, config: str, caplog: pytest.LogCaptureFixture) -> None:
    async with explicit(test_repository) as server:
        await server.load_model("add_sub")
        with caplog.at_level("ERROR"), pytest.raises(InvalidArgument) as error:
            await server.load_model("add_sub", config)
        assert error.value.message.startswith(
            "failed to load 'add_sub', failed to poll from model repository: Invalid config override: ")
        # Triton logs the reason as its poll failure (upstream L0_http/L0_grpc grep for it)
        assert "Poll failed for model directory 'add_sub': Invalid config override: " in caplog.text
        assert (await add_sub_infer(server, "add_sub"))[1] == "1"  # the loaded version serves on


async def test_bad_config_override_over_http_and_grpc(test_repository: Path, asgi_client, stub_for) -> None:
    async with explicit(test_repository) as server:
        async with asgi_client(server) as http:
            response = await http.post("/v2/repository/models/add_sub/load",
                                        json={"parameters": {"config": BAD_CONFIGS[0]}})
            assert response.status_code == 400
            assert response.json()["error"].startswith(
                "failed to load 'add_sub', failed to poll from model repository: Invalid config override: "
                "failed to parse model config JSON")
        stub = await stub_for(server)
        params = {"config": pb.ModelRepositoryParameter(string_param=BAD_CONFIGS[0])}
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="add_sub", parameters=params))
        assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rpc.value.details().startswith("failed to load 'add_sub', failed to poll from model repository")


async def test_a_config_naming_another_model_fails_as_tritons_poll(test_repository: Path, add_sub_onnx: bytes,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """L0_backend_python model_control: curl turns ``models/model{test}/load`` into a load of
    ``modeltest`` whose config says ``model{test}``; Triton's poll fails ("failed to load ...")
    and logs why. Nothing is loaded, nothing left on disk."""
    config = json.dumps({"name": "model{test}", "backend": "onnxruntime"})
    async with explicit(test_repository) as server:
        with pytest.raises(InvalidArgument) as raised:
            await server.load_model("modeltest", config, {"1/model.onnx": add_sub_onnx})
        assert raised.value.message == (
            "failed to load 'modeltest', failed to poll from model repository: unexpected directory name "
            "'modeltest' for model 'model{test}', directory name must equal model name")
        assert "Poll failed for model directory 'modeltest'" in caplog.text
        assert not await server.model_ready("modeltest") and server.repository_manager.overrides.live() == []
