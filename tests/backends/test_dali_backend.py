"""The dali backend (``backend: "dali"``) on real serialized DALI pipelines, on CPU (device_id=None).

Pipelines are defined and serialized here (``Pipeline.serialize``) into ``tmp_path``; the sample
``digits_jpeg_preprocess`` / ``digits_jpeg`` models are tested on the shared sample repository.
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import numpy as np
import pytest
import sklearn

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.common.errors import InvalidArgument

dali = pytest.importorskip("nvidia.dali")
Image = pytest.importorskip("PIL.Image")

from nvidia.dali import fn, pipeline_def, types  # noqa: E402

SAMPLE_IMAGES = sorted((Path(str(sklearn.__file__)).parent / "datasets" / "images").glob("*.jpg"))
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406]) * 255
IMAGENET_STD = np.array([0.229, 0.224, 0.225]) * 255

JPEG_CONFIG = """\
name: "{name}"
backend: "dali"
max_batch_size: 8
input [ {{ name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true }} ]
output [ {{ name: "PIXELS" data_type: TYPE_FP32 dims: [ 64 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: 50000 }}
"""


def gray8_pipeline():
    """JPEG bytes -> grayscale, 8x8 (linear, no antialiasing), 0..16: the sample's recipe."""
    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def pipe():
        jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
        images = fn.resize(images, resize_x=8, resize_y=8, interp_type=types.INTERP_LINEAR,
                           antialias=False, dtype=types.FLOAT)
        return fn.reshape(images * (16.0 / 255.0), shape=[64])
    return pipe()


def rgb224_pipeline():
    """ImageNet-style: JPEG -> RGB, 224x224 (linear with antialiasing), normalised, CHW."""
    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224, interp_type=types.INTERP_LINEAR,
                           antialias=True, dtype=types.FLOAT)
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                        mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD))
    return pipe()


def two_outputs_pipeline():
    """``X`` FP32 -> (X * 2, X + 1): outputs are matched to the config's by position."""
    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(name="X", dtype=types.FLOAT, ndim=1)
        return x * 2.0, x + 1.0
    return pipe()


def write_dali(repo: Path, name: str, config: str, pipeline=None, data: bytes | None = None) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    if data is not None:
        (folder / "1" / "model.dali").write_bytes(data)
    elif pipeline is not None:
        pipeline.serialize(filename=str(folder / "1" / "model.dali"))
    return folder


def digit_jpeg(pixels: np.ndarray, side: int = 32) -> bytes:
    """A digit (64 values 0..16) as a ``side`` x ``side`` grayscale JPEG (blocks of pixels)."""
    gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((side, side), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def digits_test_split() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return x_test.astype(np.float32), y_test


def _jpeg_request(data: bytes, model: str = "jpeg") -> InferenceRequest:
    array = np.frombuffer(data, np.uint8).reshape(1, -1)
    return InferenceRequest(model, [Tensor("IMAGE", "UINT8", array)])


async def _start(repo: Path) -> Server:
    server = Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False))
    await server.start()
    return server


async def _reason(repo: Path) -> str:
    server = await _start(repo)
    try:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        return row["reason"]
    finally:
        await server.stop()


async def test_jpegs_of_different_lengths_batch_into_one_run(tmp_path: Path) -> None:
    """Five requests, JPEGs of five lengths (allow_ragged_batch): fewer executions than requests,
    each request gets its own digit back (within JPEG's loss)."""
    write_dali(tmp_path, "jpeg", JPEG_CONFIG.format(name="jpeg"), gray8_pipeline())
    pixels, _ = digits_test_split()
    jpegs = [digit_jpeg(pixels[i], side) for i, side in enumerate((32, 16, 64, 32, 40))]
    assert len({len(j) for j in jpegs}) == 5
    server = await _start(tmp_path)
    try:
        responses = await asyncio.gather(*(server.infer(_jpeg_request(j)) for j in jpegs))
        for i, response in enumerate(responses):
            (out,) = response.outputs
            assert out.data.shape == (1, 64) and out.data.dtype == np.float32
            if i in (0, 2, 3):  # 32 and 64: whole blocks per digits pixel
                np.testing.assert_allclose(out.data[0], pixels[i], atol=0.5)
        stats = (await server.statistics("jpeg"))["model_stats"][0]
        assert stats["inference_count"] == 5
        assert stats["execution_count"] < 5  # the dynamic batcher joined ragged requests
    finally:
        await server.stop()


async def test_a_corrupt_jpeg_fails_only_its_request(tmp_path: Path) -> None:
    """A corrupt JPEG batched with good ones: it gets InvalidArgument (HTTP 400), the others
    their pixels; the pipeline DALI invalidated is rebuilt and the next request works."""
    write_dali(tmp_path, "jpeg", JPEG_CONFIG.format(name="jpeg"), gray8_pipeline())
    pixels, _ = digits_test_split()
    good = [digit_jpeg(pixels[i]) for i in range(3)]
    bad = good[0][:40] + b"\x00" * 200  # a JPEG header, then garbage
    server = await _start(tmp_path)
    try:
        results = await asyncio.gather(
            *(server.infer(_jpeg_request(j)) for j in (good[0], bad, good[1], good[2])),
            return_exceptions=True)
        assert isinstance(results[1], InvalidArgument), results[1]
        assert "DALI failed to process the request's data" in str(results[1])
        for i, result in zip((0, 1, 2), (results[0], results[2], results[3]), strict=True):
            assert not isinstance(result, BaseException), result
            np.testing.assert_allclose(result.outputs[0].data[0], pixels[i], atol=0.5)
        stats = (await server.statistics("jpeg"))["model_stats"][0]
        assert stats["execution_count"] < 4  # they did run batched
        again = await server.infer(_jpeg_request(good[2]))
        np.testing.assert_allclose(again.outputs[0].data[0], pixels[2], atol=0.5)
        with pytest.raises(InvalidArgument):
            await server.infer(_jpeg_request(b"not a jpeg at all"))
    finally:
        await server.stop()


async def test_outputs_by_position_and_unbatched_model(tmp_path: Path) -> None:
    """Config outputs A, B are the pipeline's outputs 0 and 1, whatever their names;
    max_batch_size 0: a request's rows are its samples, in chunks of the serialized batch (4)."""
    config = """name: "two" backend: "dali" max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
output [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] },
         { name: "B" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
parameters { key: "num_threads" value { string_value: "2" } }
"""
    write_dali(tmp_path, "two", config, two_outputs_pipeline())
    server = await _start(tmp_path)
    try:
        x = np.arange(18, dtype=np.float32).reshape(6, 3)
        response = await server.infer(InferenceRequest("two", [Tensor("X", "FP32", x)]))
        out = {t.name: t.data for t in response.outputs}
        np.testing.assert_array_equal(out["A"], x * 2)
        np.testing.assert_array_equal(out["B"], x + 1)
    finally:
        await server.stop()


def _config_change(old: str, new: str) -> str:
    text = JPEG_CONFIG.format(name="jpeg")
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize(("config", "data", "reason"), [
    (JPEG_CONFIG.format(name="jpeg"), b"", "model file not found"),
    (JPEG_CONFIG.format(name="jpeg"), b"\xff\xd8 this is not a pipeline", "is not a serialized DALI pipeline"),
    (_config_change('name: "IMAGE"', 'name: "JPEG"'),
     None, "Configuration file contains config for JPEG but such input is not present in the pipeline"),
    (_config_change("} ]\noutput", '}, { name: "EXTRA" data_type: TYPE_UINT8 dims: [ -1 ] } ]\noutput'),
     None, "Configuration file contains config for EXTRA"),
    (_config_change("dims: [ 64 ] }", 'dims: [ 64 ] }, { name: "MORE" data_type: TYPE_FP32 dims: [ 1 ] }'),
     None, "The number of outputs specified in the DALI pipeline and the configuration file do not "
     "match. Model config outputs: 2, Pipeline outputs: 1"),
    (_config_change("dynamic_batching", 'parameters { key: "split_along_outer_axis" value { '
                    'string_value: "PIXELS" } }\ndynamic_batching'), None, "'split_along_outer_axis' is not supported"),
    (_config_change("dynamic_batching", 'parameters { key: "num_threads" value { '
                    'string_value: "many" } }\ndynamic_batching'), None, "'num_threads' must be an integer"),
    (_config_change("TYPE_UINT8", "TYPE_INT8"), None,
     'Mismatch of data_type config for "IMAGE". Data type defined in config: TYPE_INT8, data type '
     "defined in pipeline: TYPE_UINT8"),
    (_config_change("TYPE_FP32", "TYPE_FP16"), None, None),  # the output declares no type: loads
])
async def test_load_errors_are_clear(tmp_path: Path, config: str, data, reason: str | None) -> None:
    write_dali(tmp_path, "jpeg", config, gray8_pipeline() if data is None else None,
               data=data or None)
    if reason is None:
        server = await _start(tmp_path)
        try:
            assert (await server.repository_index())[0]["state"] == "READY"
        finally:
            await server.stop()
        return
    assert reason in await _reason(tmp_path)


async def test_a_string_input_is_refused(tmp_path: Path) -> None:
    """DALI takes numeric tensors (the external source declares no dtype here, so the config's
    TYPE_STRING gets past the type comparison to the backend's own rule)."""
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(name="IMAGE", ndim=1)

    config = """name: "s" backend: "dali" max_batch_size: 2
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]"""
    write_dali(tmp_path, "s", config, pipe())
    assert "DALI takes numeric tensors" in await _reason(tmp_path)


async def test_a_pipeline_source_missing_from_the_config_fails_the_load(tmp_path: Path) -> None:
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(name="A", ndim=1) + fn.external_source(name="B", ndim=1)

    config = """name: "ab" backend: "dali" max_batch_size: 2
input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]"""
    write_dali(tmp_path, "ab", config, pipe())
    # auto-complete adds B, but the pipeline declares no type for it (Triton's autofill text)
    assert 'Missing data_type config for "B"' in await _reason(tmp_path)
    # without auto-complete the backend's own check
    server = Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False,
                                  strict_model_config=True))
    await server.start()
    try:
        assert 'Missing config for "B" input.' in (await server.repository_index())[0]["reason"]
    finally:
        await server.stop()


AUTOSERIALIZED = """\
import nvidia.dali as dali
from nvidia.dali import fn, types
from nvidia.dali.plugin.triton import autoserialize
from helper import SCALE  # a module beside it


@autoserialize
@dali.pipeline_def(batch_size=8, num_threads=1, device_id=None)
def pipe():
    jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.resize(images, resize_x=8, resize_y=8, interp_type=types.INTERP_LINEAR,
                       antialias=False, dtype=types.FLOAT)
    return fn.reshape(images * SCALE, shape=[64])
"""


@pytest.mark.parametrize("filename", ["dali.py", "my_pipeline.py"])
async def test_a_python_pipeline_is_autoserialized(tmp_path: Path, filename: str) -> None:
    """``dali.py`` (the fallback) or a ``default_model_filename`` ending in .py with an
    ``@autoserialize`` pipeline_def: serialized in a child process, then served like the
    serialized recipe (same pixels)."""
    config = JPEG_CONFIG.format(name="jpeg")
    if filename != "dali.py":
        config = config.replace('backend: "dali"', f'backend: "dali"\ndefault_model_filename: "{filename}"')
    folder = write_dali(tmp_path, "jpeg", config)
    (folder / "1" / filename).write_text(AUTOSERIALIZED)
    (folder / "1" / "helper.py").write_text("SCALE = 16.0 / 255.0\n")
    write_dali(tmp_path, "serialized", JPEG_CONFIG.format(name="serialized"), gray8_pipeline())
    pixels, _ = digits_test_split()
    server = await _start(tmp_path)
    try:
        request = _jpeg_request(digit_jpeg(pixels[0]))
        got = (await server.infer(request)).outputs[0].data
        request.model_name = "serialized"
        expected = (await server.infer(request)).outputs[0].data
        np.testing.assert_array_equal(got, expected)
    finally:
        await server.stop()


@pytest.mark.parametrize(("source", "reason"), [
    ("import nvidia.dali\n", "Precisely one autoserialize function must exist in the module. Found none."),
    ("raise ValueError('broken pipeline module')\n", "ValueError: broken pipeline module"),
    (None, "model file not found"),
])
async def test_autoserialization_errors_are_clear(tmp_path: Path, source: str | None, reason: str) -> None:
    folder = write_dali(tmp_path, "jpeg", JPEG_CONFIG.format(name="jpeg"))
    if source is not None:
        (folder / "1" / "dali.py").write_text(source)
    text = await _reason(tmp_path)
    assert reason in text, text
    if source is not None:
        assert "autoserialization of 'dali.py' failed" in text
        # DALI's (or the module's) error text alone, not the child's traceback
        assert "Traceback" not in text and 'File "' not in text, text


async def test_without_dali_the_load_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    write_dali(tmp_path, "jpeg", JPEG_CONFIG.format(name="jpeg"), gray8_pipeline())
    monkeypatch.setitem(sys.modules, "nvidia.dali.pipeline", None)  # import -> ImportError
    reason = await _reason(tmp_path)
    assert "pip install 'workbench[dali]'" in reason and "nvidia-dali-cuda120" in reason


def _pillow_rgb224(path: Path) -> np.ndarray:
    """Pillow's decode, bilinear (antialiased) resize per channel in float, normalise -> CHW."""
    rgb = np.asarray(Image.open(path).convert("RGB"), np.float32)
    channels = [np.asarray(Image.fromarray(rgb[..., c], mode="F").resize(
        (224, 224), Image.Resampling.BILINEAR)) for c in range(3)]
    return ((np.stack(channels, -1) - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)


async def test_rgb224_preprocessing_matches_pillow_on_sklearn_sample_images(tmp_path: Path) -> None:
    """scikit-learn's china.jpg and flower.jpg (640x427), their file bytes sent as they are.
    Decoding is bit-equal (both libjpeg-turbo); DALI's antialiased linear resize and Pillow's
    BILINEAR (a triangle filter scaled to the reduction) agree within 0.01 of 255 inside the
    image (measured 0.002); on the outer 2-pixel border they differ by up to 8 of 255 (measured
    7.1: the filters treat the image edge differently), so the border has its own bound."""
    assert [p.name for p in SAMPLE_IMAGES] == ["china.jpg", "flower.jpg"]
    config = """name: "rgb" backend: "dali" max_batch_size: 4
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "CHW" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]"""
    write_dali(tmp_path, "rgb", config, rgb224_pipeline())
    server = await _start(tmp_path)
    try:
        for path in SAMPLE_IMAGES:
            response = await server.infer(_jpeg_request(path.read_bytes(), "rgb"))
            got = response.outputs[0].data[0]
            diff = np.abs(got - _pillow_rgb224(path)) * IMAGENET_STD[:, None, None]
            assert diff[:, 2:-2, 2:-2].max() < 0.01, (path.name, diff[:, 2:-2, 2:-2].max())
            assert diff.max() < 8, (path.name, diff.max())
    finally:
        await server.stop()


def _bilinear(image: np.ndarray, size: int) -> np.ndarray:
    """Plain bilinear resize (pixel centres at +0.5, edges clamped, no antialiasing)."""
    def axis(n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.clip((np.arange(size) + 0.5) * n_in / size - 0.5, 0, n_in - 1)
        lo = np.floor(x).astype(int)
        return lo, np.minimum(lo + 1, n_in - 1), x - lo
    (y0, y1, wy), (x0, x1, wx) = axis(image.shape[0]), axis(image.shape[1])
    rows = image[y0] * (1 - wy)[:, None] + image[y1] * wy[:, None]
    return rows[:, x0] * (1 - wx) + rows[:, x1] * wx


async def test_digits_preprocess_sample_on_sklearn_sample_images(sample_repository: Path) -> None:
    """The sample pipeline on china.jpg / flower.jpg against Pillow's grayscale decode
    (``draft("L")``: libjpeg's own luma, bit-equal to DALI's) and a numpy bilinear 8x8, scaled
    to 0..16: within 1e-3 of 16 (float rounding)."""
    options = ServerOptions(model_repository=[str(sample_repository)], model_control_mode="explicit",
                            load_model=["digits_jpeg_preprocess"])
    async with Server(options) as server:
        for path in SAMPLE_IMAGES:
            response = await server.infer(_jpeg_request(path.read_bytes(), "digits_jpeg_preprocess"))
            image = Image.open(path)
            image.draft("L", image.size)
            gray = np.asarray(image, np.float64)
            expected = _bilinear(gray, 8).reshape(64) * 16 / 255
            np.testing.assert_allclose(response.outputs[0].data[0], expected, atol=1e-3)


async def test_digits_jpeg_ensemble_accuracy_equals_digits_mlp(sample_repository: Path,
                                                                asgi_client) -> None:
    """The held-out digits as 32x32 JPEGs through the ensemble (HTTP binary): accuracy within
    0.01 of digits_mlp's on the raw pixels, and DALI's batches hold several requests."""
    pixels, labels = digits_test_split()
    pixels, labels = pixels[:200], labels[:200]
    options = ServerOptions(model_repository=[str(sample_repository)], model_control_mode="explicit",
                            load_model=["digits_jpeg"])
    async with Server(options) as server:
        index = {row["name"]: row.get("state") for row in await server.repository_index()}
        assert index["digits_jpeg_preprocess"] == index["digits_mlp"] == "READY"

        async def logits(i: int) -> np.ndarray:
            response = await server.infer(_jpeg_request(digit_jpeg(pixels[i]), "digits_jpeg"))
            return response.outputs[0].data[0]

        piped = np.stack(await asyncio.gather(*(logits(i) for i in range(len(pixels)))))
        raw = await server.infer(InferenceRequest("digits_mlp", [Tensor("pixels", "FP32", pixels[:64])]))
        stats = (await server.statistics("digits_jpeg_preprocess"))["model_stats"][0]
    accuracy = float((piped.argmax(1) == labels).mean())
    assert accuracy >= 0.95, accuracy
    np.testing.assert_allclose(piped[:64], raw.outputs[0].data, atol=0.5)
    assert stats["execution_count"] < stats["inference_count"] == len(pixels)


def declared_pipeline():
    """The sample's recipe declaring its types and ranks (what Triton's auto-complete reads)."""
    @pipeline_def(batch_size=16, num_threads=1, device_id=None, output_dtype=[types.FLOAT],
                  output_ndim=[1])
    def pipe():
        jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
        images = fn.resize(images, resize_x=8, resize_y=8, antialias=False, dtype=types.FLOAT)
        return fn.reshape(images, shape=[64])
    return pipe()


@pytest.mark.parametrize("config", [None, 'backend: "dali"\noutput [ { name: "PIXELS" } ]\n'])
async def test_auto_complete_from_the_pipeline(tmp_path: Path, config: str | None) -> None:
    """No config, or one naming only the backend and the output: inputs, outputs,
    max_batch_size (the pipeline's 16) and dynamic batching come from the pipeline, as in
    Triton's dali_backend; the model then serves."""
    folder = tmp_path / "auto"
    (folder / "1").mkdir(parents=True)
    declared_pipeline().serialize(filename=str(folder / "1" / "model.dali"))
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    server = await _start(tmp_path)
    try:
        completed = await server.model_config("auto")
        assert completed.backend == "dali" and completed.max_batch_size == 16
        (image,) = completed.input
        assert (image.name, image.data_type, list(image.dims), image.allow_ragged_batch) == (
            "IMAGE", 2, [-1], True)  # TYPE_UINT8
        (output,) = completed.output
        assert output.name == ("PIXELS" if config else "__Reshape_2")
        assert (output.data_type, list(output.dims)) == (11, [-1])  # TYPE_FP32
        assert completed.HasField("dynamic_batching")
        pixels, _ = digits_test_split()
        response = await server.infer(_jpeg_request(digit_jpeg(pixels[0]), "auto"))
        assert response.outputs[0].data.shape == (1, 64)
    finally:
        await server.stop()


async def test_auto_complete_keeps_an_explicit_max_batch_size_0(tmp_path: Path) -> None:
    """``max_batch_size: 0`` in the text: unbatched (Triton reads it from config.pbtxt's text),
    so the dims get the samples' dimension first and no dynamic batching is added."""
    folder = tmp_path / "auto"
    (folder / "1").mkdir(parents=True)
    declared_pipeline().serialize(filename=str(folder / "1" / "model.dali"))
    (folder / "config.pbtxt").write_text('backend: "dali"\nmax_batch_size: 0  # unbatched\n')
    server = await _start(tmp_path)
    try:
        completed = await server.model_config("auto")
        assert completed.max_batch_size == 0 and not completed.HasField("dynamic_batching")
        assert list(completed.input[0].dims) == [-1, -1] and list(completed.output[0].dims) == [-1, -1]
    finally:
        await server.stop()


def test_the_pipeline_def_reader_knows_dalis_types() -> None:
    """The DALIDataType values the reader maps, against DALI's own enum."""
    from tritonclient.grpc.model_config_pb2 import DataType

    from workbench.config.dali_pipeline import DALI_TO_CONFIG_DTYPE

    for name, config_name in [("UINT8", "TYPE_UINT8"), ("INT32", "TYPE_INT32"), ("INT64", "TYPE_INT64"),
                              ("FLOAT16", "TYPE_FP16"), ("FLOAT", "TYPE_FP32"), ("FLOAT64", "TYPE_FP64"),
                              ("BOOL", "TYPE_BOOL"), ("UINT16", "TYPE_UINT16"), ("INT8", "TYPE_INT8")]:
        assert DALI_TO_CONFIG_DTYPE[int(getattr(types, name))] == DataType.Value(config_name)


async def test_outputs_of_different_shapes_per_request(tmp_path: Path) -> None:
    """A decode-only pipeline: images of different sizes in one batch come back each in its own
    shape (DALI's non-uniform batch, split per request); one request whose two JPEGs (zero-padded
    to one length, as Triton asks) decode to different shapes cannot be one tensor: 400."""
    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def pipe():
        return fn.decoders.image(fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1),
                                 device="cpu", output_type=types.GRAY)

    config = """name: "decode" backend: "dali" max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "GRAY" data_type: TYPE_UINT8 dims: [ -1, -1, 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 50000 }"""
    write_dali(tmp_path, "decode", config, pipe())
    pixels, _ = digits_test_split()
    jpegs = [digit_jpeg(pixels[i], side) for i, side in enumerate((16, 24, 32))]
    server = await _start(tmp_path)
    try:
        responses = await asyncio.gather(*(server.infer(_jpeg_request(j, "decode")) for j in jpegs))
        assert [r.outputs[0].data.shape for r in responses] == [(1, 16, 16, 1), (1, 24, 24, 1),
                                                                 (1, 32, 32, 1)]
        stats = (await server.statistics("decode"))["model_stats"][0]
        assert stats["execution_count"] < 3
        width = max(len(j) for j in jpegs[:2])
        two = np.zeros((2, width), np.uint8)
        for row, data in enumerate(jpegs[:2]):
            two[row, : len(data)] = np.frombuffer(data, np.uint8)
        with pytest.raises(InvalidArgument, match="has samples of different shapes"):
            await server.infer(InferenceRequest("decode", [Tensor("IMAGE", "UINT8", two)]))
    finally:
        await server.stop()


async def test_an_optional_input_left_out_is_a_400_not_a_failed_batch(tmp_path: Path) -> None:
    """Every external source is fed each run: a request without an input the config marks
    optional gets InvalidArgument; a request with both works."""
    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(name="A", dtype=types.FLOAT, ndim=1) + fn.external_source(
            name="B", dtype=types.FLOAT, ndim=1)

    config = """name: "ab" backend: "dali" max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 2 ] } ]"""
    write_dali(tmp_path, "ab", config, pipe())
    server = await _start(tmp_path)
    try:
        a = np.ones((1, 2), np.float32)
        with pytest.raises(InvalidArgument, match="needs input 'B' in every request"):
            await server.infer(InferenceRequest("ab", [Tensor("A", "FP32", a)]))
        both = await server.infer(InferenceRequest("ab", [Tensor("A", "FP32", a), Tensor("B", "FP32", a)]))
        np.testing.assert_array_equal(both.outputs[0].data, a + a)
    finally:
        await server.stop()


async def test_the_configs_max_batch_size_is_the_pipelines_batch_size(tmp_path: Path) -> None:
    """Serialized with batch_size 4, served with max_batch_size 8 (Triton's dali_backend builds
    the pipeline with the config's): a request of 6 rows is one run of 6 samples."""
    write_dali(tmp_path, "two", """name: "two" backend: "dali" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "A" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 3 ] } ]
""", two_outputs_pipeline())
    server = await _start(tmp_path)
    try:
        x = np.arange(18, dtype=np.float32).reshape(6, 3)
        response = await server.infer(InferenceRequest("two", [Tensor("X", "FP32", x)]))
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
        stats = (await server.statistics("two"))["model_stats"][0]
        assert stats["execution_count"] == 1 and stats["inference_count"] == 6
    finally:
        await server.stop()
