"""The tensorflow backend (``platform: "tensorflow_savedmodel"``) on real SavedModels, on CPU:
load, signature choice, auto-complete, load errors, batching, thread settings, lazy import, living
with torch/onnxruntime in one process, and the digits_savedmodel sample end to end through
tritonclient HTTP and gRPC."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.config.tensorflow_signature import import_tensorflow
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

#: the tensorflow module, imported by the first test here (not at collection: ~7 s, ~660 MiB)
tf: Any = None


@pytest.fixture(scope="module", autouse=True)
def _tensorflow() -> None:
    """Not pytest.importorskip: TensorFlow goes in after torch's libtriton (import_tensorflow)."""
    global tf
    try:
        tf = import_tensorflow()
    except ImportError:
        pytest.skip("tensorflow is not installed")
ROOT = Path(__file__).resolve().parents[2]

TF_CONFIG = """\
name: "add_sub"
platform: "tensorflow_savedmodel"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 20000 }
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _save_add_sub(path: Path) -> None:
    """INPUT0, INPUT1 FP32 [-1, 16] -> serving_default: OUTPUT0 = a + b, OUTPUT1 = a - b;
    signature ``product``: PRODUCT = a * b."""
    spec = [tf.TensorSpec([None, 16], tf.float32, name="INPUT0"),
            tf.TensorSpec([None, 16], tf.float32, name="INPUT1")]

    class AddSub(tf.Module):
        @tf.function(input_signature=spec)
        def add_sub(self, a, b):
            return {"OUTPUT0": a + b, "OUTPUT1": a - b}

        @tf.function(input_signature=spec)
        def product(self, a, b):
            return {"PRODUCT": a * b}

    module = AddSub()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.add_sub,
                                                       "product": module.product})


def _save_doubler(path: Path, shape: list, signature: str) -> Path:
    """A SavedModel whose only signature, ``signature``, maps X (FP32 ``shape``) to Y = 2 X."""
    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="X")])
        def double(self, x):
            return {"Y": x * 2}

    module = Doubler()
    tf.saved_model.save(module, str(path), signatures={signature: module.double})
    return path


@pytest.fixture(scope="module")
def add_sub_savedmodel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tf") / "model.savedmodel"
    _save_add_sub(path)
    return path


def write_tf_model(repo: Path, savedmodel: Path, config: str | None = TF_CONFIG,
                   name: str = "add_sub") -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    shutil.copytree(savedmodel, folder / "1" / "model.savedmodel")
    if config is not None:
        (folder / "config.pbtxt").write_text(config.replace('name: "add_sub"', f'name: "{name}"'))
    return folder


def _request(a: np.ndarray, b: np.ndarray, model: str = "add_sub") -> InferenceRequest:
    return InferenceRequest(model, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)])


async def _start(repo: Path, **options) -> Server:
    server = Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False, **options))
    await server.start()
    return server


async def test_savedmodel_infer_and_concurrent_requests_batch(tmp_path: Path, add_sub_savedmodel) -> None:
    write_tf_model(tmp_path, add_sub_savedmodel)
    server = await _start(tmp_path)
    try:
        rng = np.random.default_rng(0)
        pairs = [(rng.random((n, 16), np.float32), rng.random((n, 16), np.float32))
                 for n in (1, 3, 2, 1, 1)]
        responses = await asyncio.gather(*(server.infer(_request(a, b)) for a, b in pairs))
        for (a, b), response in zip(pairs, responses, strict=True):
            out = {t.name: t.data for t in response.outputs}
            np.testing.assert_array_equal(out["OUTPUT0"], a + b)
            np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        stats = (await server.statistics("add_sub"))["model_stats"][0]
        metadata = await server.model_metadata("add_sub")
    finally:
        await server.stop()
    assert stats["inference_count"] == 8
    assert stats["execution_count"] < 5  # the dynamic batcher joined some requests
    assert metadata["platform"] == "tensorflow_savedmodel"


async def test_tf_signature_def_chooses_the_signature(tmp_path: Path, add_sub_savedmodel) -> None:
    config = TF_CONFIG.split("output [")[0] + textwrap.dedent("""\
        output [ { name: "PRODUCT" data_type: TYPE_FP32 dims: [ 16 ] } ]
        parameters { key: "TF_SIGNATURE_DEF" value { string_value: "product" } }
        """)
    write_tf_model(tmp_path, add_sub_savedmodel, config)
    server = await _start(tmp_path)
    try:
        a, b = np.full((2, 16), 3, np.float32), np.full((2, 16), 2, np.float32)
        response = await server.infer(_request(a, b))
    finally:
        await server.stop()
    assert [t.name for t in response.outputs] == ["PRODUCT"]
    np.testing.assert_array_equal(response.outputs[0].data, a * b)


async def test_without_serving_default_the_first_other_signature_serves(tmp_path: Path, caplog) -> None:
    """Triton's TRITONTF_ModelCreateFromSavedModel: no TF_SIGNATURE_DEF and no
    serving_default -> the first signature that is not an init/train op, with a warning."""
    saved = _save_doubler(tmp_path / "saved", [None, 4], "predict")
    repo = tmp_path / "repo"
    write_tf_model(repo, saved, 'platform: "tensorflow_savedmodel"\nmax_batch_size: 2\n', name="doubler")
    server = await _start(repo)
    try:
        x = np.ones((1, 4), np.float32)
        response = await server.infer(InferenceRequest("doubler", [Tensor("X", "FP32", x)]))
    finally:
        await server.stop()
    np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    assert "unable to find serving signature 'serving_default' in model 'doubler'; using signature " \
           "'predict'" in caplog.text


async def test_bytes_in_and_out_as_tf_string(tmp_path: Path) -> None:
    class Text(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string, name="TEXT")])
        def serve(self, text):
            return {"UPPER": tf.strings.upper(text), "LENGTH": tf.strings.length(text)}

    module = Text()
    saved = tmp_path / "saved"
    tf.saved_model.save(module, str(saved), signatures=module.serve)
    repo = tmp_path / "repo"
    write_tf_model(repo, saved, 'platform: "tensorflow_savedmodel"\nmax_batch_size: 4\n', name="text")
    server = await _start(repo)
    try:
        config = await server.model_config("text")
        text = np.array([[b"abc"], [b"hello"]], dtype=object)
        response = await server.infer(InferenceRequest("text", [Tensor("TEXT", "BYTES", text)]))
    finally:
        await server.stop()
    assert [(t.name, t.data_type) for t in config.input] == [("TEXT", 13)]  # TYPE_STRING
    out = {t.name: t.data for t in response.outputs}
    assert out["UPPER"].tolist() == [[b"ABC"], [b"HELLO"]]
    assert out["LENGTH"].tolist() == [[3], [5]]


async def test_autocomplete_from_the_signature(tmp_path: Path, add_sub_savedmodel) -> None:
    """Triton's tensorflow auto-complete: a batching signature and max_batch_size 0 -> the
    default max batch size (4), dynamic batching, inputs/outputs with the batch dim dropped."""
    write_tf_model(tmp_path, add_sub_savedmodel, 'platform: "tensorflow_savedmodel"\n')
    server = await _start(tmp_path)
    try:
        config = json_format.MessageToDict(await server.model_config("add_sub"))
    finally:
        await server.stop()
    assert config["backend"] == "tensorflow" and config["maxBatchSize"] == 4
    assert "dynamicBatching" in config
    assert [(t["name"], t["dataType"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", ["16"]), ("INPUT1", "TYPE_FP32", ["16"])]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [
        ("OUTPUT0", ["16"]), ("OUTPUT1", ["16"])]


async def test_no_config_selects_tensorflow_from_the_folder_and_a_broken_savedmodel_fails(
        tmp_path: Path, add_sub_savedmodel) -> None:
    """Triton core's detection: a ``model.savedmodel`` folder is tensorflow_savedmodel; the
    signature completes the rest. A saved_model.pb that is no protobuf fails auto-complete
    with Triton's text."""
    write_tf_model(tmp_path, add_sub_savedmodel, None)
    broken = tmp_path / "broken" / "1" / "model.savedmodel"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"\xff\xff\xff")
    server = await _start(tmp_path)
    try:
        config = await server.model_config("add_sub")
        rows = {row["name"]: row for row in await server.repository_index()}
    finally:
        await server.stop()
    assert (config.backend, config.platform, config.default_model_filename) == (
        "tensorflow", "tensorflow_savedmodel", "model.savedmodel")
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"] and config.max_batch_size == 4
    assert rows["add_sub"]["state"] == "READY" and rows["broken"]["state"] == "UNAVAILABLE"
    assert ("unable to auto-complete model configuration for 'broken', failed to load model: "
            "unable to load model 'broken': cannot read SavedModel" in rows["broken"]["reason"]), rows


async def test_autocomplete_keeps_listed_outputs_and_rejects_batching_for_a_fixed_signature(
        tmp_path: Path) -> None:
    class Fixed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.int32, name="X")])
        def serve(self, x):
            return {"Y": x * 2, "Z": x}

    module = Fixed()
    saved = tmp_path / "saved"
    tf.saved_model.save(module, str(saved), signatures=module.serve)
    repo = tmp_path / "repo"
    write_tf_model(repo, saved, 'platform: "tensorflow_savedmodel"\noutput [ { name: "Y" } ]\n',
                   name="fixed")
    write_tf_model(repo, saved, 'platform: "tensorflow_savedmodel"\nmax_batch_size: 8\n', name="batched")
    server = await _start(repo)
    try:
        config = json_format.MessageToDict(await server.model_config("fixed"))
        x = np.arange(6, dtype=np.int32).reshape(2, 3)
        response = await server.infer(InferenceRequest("fixed", [Tensor("X", "INT32", x)]))
        rows = {row["name"]: row for row in await server.repository_index()}
    finally:
        await server.stop()
    assert config.get("maxBatchSize", 0) == 0 and "dynamicBatching" not in config
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("X", ["2", "3"])]
    assert [(t["name"], t["dataType"]) for t in config["output"]] == [("Y", "TYPE_INT32")]
    np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    assert rows["batched"]["state"] == "UNAVAILABLE"
    assert ("configuration specified max-batch 8 but model signature does not support batching"
            in rows["batched"]["reason"]), rows["batched"]


@pytest.mark.parametrize(("change", "reason"), [
    (("instance_group", 'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "nope" } }\n'
      "instance_group"), "expected 'nope' signature; the SavedModel has signatures "
                         "['product', 'serving_default']"),
    (('name: "OUTPUT1"', 'name: "OUTPUT9"'), "unexpected inference output 'OUTPUT9': signature "
                                             "'serving_default' has outputs ['OUTPUT0', 'OUTPUT1']"),
    (('name: "INPUT1"', 'name: "INPUT9"'), "unexpected inference input 'INPUT9'"),
    (('{ name: "INPUT1" data_type: TYPE_FP32', '{ name: "INPUT1" data_type: TYPE_INT32'),
     "configuration expects datatype TYPE_INT32 for input 'INPUT1', model provides TYPE_FP32"),
    (('{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }',
      '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] }'),
     "tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model configuration "
     "specifies 2 dimensions (an initial batch dimension"),
    (("max_batch_size: 8", "max_batch_size: 0"), "tensor 'INPUT0': the model expects 2 dimensions"),
    (("KIND_CPU", "KIND_GPU"), "KIND_GPU but TensorFlow sees no GPU"),
    (('platform: "tensorflow_savedmodel"', 'platform: "tensorflow_graphdef"\n'
      'default_model_filename: "model.savedmodel"'), "GraphDef models (platform "
                                                     "'tensorflow_graphdef') are not served here"),
    (("instance_group", 'parameters { key: "TF_GRAPH_TAG" value { string_value: "train" } }\n'
      "instance_group"), "expected 'train' tag; the SavedModel has tags ['serve']"),
])
async def test_load_errors_are_clear(tmp_path: Path, add_sub_savedmodel, change, reason) -> None:
    if "KIND_GPU" in change and tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU")
    write_tf_model(tmp_path, add_sub_savedmodel, TF_CONFIG.replace(*change))
    server = await _start(tmp_path, strict_model_config=True)
    try:
        row = (await server.repository_index())[0]
    finally:
        await server.stop()
    assert row["state"] == "UNAVAILABLE"
    assert reason in row["reason"], row["reason"]


async def test_missing_savedmodel_folder_fails_the_load(tmp_path: Path) -> None:
    (tmp_path / "add_sub" / "1").mkdir(parents=True)
    (tmp_path / "add_sub" / "config.pbtxt").write_text(TF_CONFIG)
    server = await _start(tmp_path)
    try:
        row = (await server.repository_index())[0]
    finally:
        await server.stop()
    assert row["state"] == "UNAVAILABLE" and "model.savedmodel" in row["reason"], row


async def test_without_tensorflow_the_load_says_what_to_install(
        tmp_path: Path, add_sub_savedmodel, monkeypatch) -> None:
    write_tf_model(tmp_path, add_sub_savedmodel)
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow -> ImportError
    server = await _start(tmp_path)
    try:
        row = (await server.repository_index())[0]
    finally:
        await server.stop()
    assert row["state"] == "UNAVAILABLE"
    assert "pip install 'workbench[tensorflow]'" in row["reason"], row["reason"]


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_tensorflow_is_imported_only_when_a_tensorflow_model_loads() -> None:
    result = _run("""
        import sys
        import workbench.hosts.cli, workbench.backends.registry, workbench.backends.tensorflow
        import workbench.config.tensorflow_signature
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_tf_and_onnx_models_then_torch_triton_in_one_process(tmp_path: Path, add_sub_savedmodel) -> None:
    """A TensorFlow, an ONNX and an OpenVINO model load and serve in one server; torch's triton
    (loaded by a torch.optim optimizer) after TensorFlow does not kill the process
    (tensorflow/tensorflow#124205) whichever path imports TensorFlow first (here the loader's
    framework import: strict config, no auto-complete), and the first model's thread settings apply."""
    config = TF_CONFIG.replace("instance_group", "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
        for k, v in (("TF_NUM_INTRA_THREADS", "1"), ("TF_NUM_INTER_THREADS", "2"))) + "instance_group")
    write_tf_model(tmp_path, add_sub_savedmodel, config, name="tf_add_sub")
    write_model(tmp_path, "onnx_add_sub", ADD_SUB_CONFIG.replace('name: "add_sub"', 'name: "onnx_add_sub"'),
                add_sub_graph())
    ov = pytest.importorskip("openvino")
    vino = write_model(tmp_path, "ov_add_sub", ADD_SUB_CONFIG.replace('name: "add_sub"', 'name: "ov_add_sub"')
                       .replace('backend: "onnxruntime"', 'backend: "openvino"'), add_sub_graph())
    ov.save_model(ov.convert_model(str(vino / "1" / "model.onnx")), str(vino / "1" / "model.xml"))
    (vino / "1" / "model.onnx").unlink()
    result = _run(f"""
        import asyncio, numpy as np
        from workbench import InferenceRequest, Server, ServerOptions, Tensor

        async def main():
            # strict: no auto-complete, so the loader's framework import is the first TF import
            server = Server(ServerOptions(model_repository=[{str(tmp_path)!r}], strict_model_config=True))
            await server.start()
            a = np.ones((2, 16), np.float32)
            for name in ("tf_add_sub", "onnx_add_sub", "ov_add_sub"):
                response = await server.infer(InferenceRequest(name, [Tensor("INPUT0", "FP32", a),
                                                                      Tensor("INPUT1", "FP32", a)]))
                print(name, float(response.outputs[0].data.sum()))
            await server.stop()

        asyncio.run(main())
        import tensorflow as tf
        print("threads", tf.config.threading.get_intra_op_parallelism_threads(),
              tf.config.threading.get_inter_op_parallelism_threads())
        import torch
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # loads torch._dynamo + triton
        print("torch ok")
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines == ["tf_add_sub 64.0", "onnx_add_sub 64.0", "ov_add_sub 64.0", "threads 1 2", "torch ok"], \
        result.stdout


def test_the_first_model_setting_tensorflow_threads_wins() -> None:
    """TF2's thread pools are one per process: two models setting them before TensorFlow ran
    (parallel loads) -> the first one's values, and the second one is told (it set them
    silently, last one winning, before the runtime was started under the lock)."""
    result = _run("""
        import logging
        from tritonclient.grpc.model_config_pb2 import ModelConfig
        from workbench.backends.tensorflow import apply_thread_settings
        from workbench.config.tensorflow_signature import import_tensorflow

        logging.basicConfig()
        tf = import_tensorflow()
        for name, intra in (("first", "1"), ("second", "3")):
            config = ModelConfig(name=name)
            config.parameters["TF_NUM_INTRA_THREADS"].string_value = intra
            apply_thread_settings(tf, config)
        print("intra", tf.config.threading.get_intra_op_parallelism_threads())
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["intra", "1"], result.stdout
    assert "model 'second': TF_NUM_INTRA_THREADS=3 not applied" in result.stderr, result.stderr[-3000:]


async def test_digits_savedmodel_sample_autocompletes_from_a_minimal_config(
        sample_repository: Path, tmp_path: Path) -> None:
    """The sample's SavedModel with only platform and max_batch_size: auto-complete gives the
    inputs/outputs of the sample's full config."""
    sample = sample_repository / "digits_savedmodel"
    folder = tmp_path / "digits_savedmodel"
    shutil.copytree(sample / "1", folder / "1")
    (folder / "config.pbtxt").write_text('platform: "tensorflow_savedmodel"\nmax_batch_size: 64\n')
    server = await _start(tmp_path)
    try:
        config = json_format.MessageToDict(await server.model_config("digits_savedmodel"))
    finally:
        await server.stop()
    assert [(t["name"], t["dataType"], t["dims"]) for t in config["input"]] == [
        ("pixels", "TYPE_FP32", ["64"])]
    assert [(t["name"], t["dataType"], t["dims"]) for t in config["output"]] == [
        ("logits", "TYPE_FP32", ["10"])]
    assert config["maxBatchSize"] == 64 and "dynamicBatching" in config


# --- the sample end to end: a real `workbench serve`, tritonclient HTTP and gRPC ---------------


@pytest.fixture(scope="module")
def digits_server(sample_repository: Path):
    from workbench.testing.process import ServerProcess

    process = ServerProcess([f"--model-repository={sample_repository}", "--model-control-mode=explicit",
                             "--load-model=digits_savedmodel", "--load-model=digits_mlp"])
    yield process
    process.stop()


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_digits_savedmodel_matches_digits_mlp_v1(digits_server, protocol: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    pixels = x_test.astype(np.float32)
    if protocol == "http":
        module, client = httpclient, httpclient.InferenceServerClient(digits_server.url)
    else:
        module, client = grpcclient, grpcclient.InferenceServerClient(digits_server.grpc_url)

    def logits_of(model: str, version: str = "") -> np.ndarray:
        chunks = []
        for start in range(0, len(pixels), 64):
            chunk = pixels[start : start + 64]
            tensor = module.InferInput("pixels", list(chunk.shape), "FP32")
            tensor.set_data_from_numpy(chunk)
            result = client.infer(model, [tensor], model_version=version,
                                  outputs=[module.InferRequestedOutput("logits")])
            chunks.append(result.as_numpy("logits"))
        return np.concatenate(chunks)

    try:
        metadata = client.get_model_metadata("digits_savedmodel")
        platform = metadata["platform"] if protocol == "http" else metadata.platform
        logits, reference = logits_of("digits_savedmodel"), logits_of("digits_mlp", "1")
    finally:
        client.close()
    assert platform == "tensorflow_savedmodel"
    assert logits.shape == (len(pixels), 10) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, reference, rtol=0, atol=1e-5)
    assert float((logits.argmax(axis=1) == y_test).mean()) >= 0.9


async def test_an_output_reshape_is_undone_for_the_client(tmp_path: Path) -> None:
    """dims [1] reshape [] (Triton's scalar idiom): the signature takes and makes [batch];
    the client gets [batch,1]."""
    from workbench.testing.models import reshape_config

    saved = _save_doubler(tmp_path / "saved", [None], "serving_default")
    repo = tmp_path / "repo"
    write_tf_model(repo, saved, reshape_config("reshaped", "tensorflow_savedmodel", 8, "1", "", ("X", "Y")),
                   name="reshaped")
    server = await _start(repo)
    try:
        x = np.array([[1.0], [2.0], [3.0]], np.float32)
        response = await server.infer(InferenceRequest("reshaped", [Tensor("X", "FP32", x)]))
    finally:
        await server.stop()
    assert response.outputs[0].data.shape == (3, 1)
    np.testing.assert_array_equal(response.outputs[0].data, x * 2)
