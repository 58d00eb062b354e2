"""Build the ``digits_jpeg_preprocess`` sample model: a DALI pipeline, JPEG bytes -> digits pixels.

The pipeline (``1/model.dali``, serialized with ``Pipeline.serialize``) takes one JPEG per sample
(``IMAGE`` UINT8 [-1]: the file's bytes), decodes it to grayscale, resizes it to 8x8 (linear,
no antialiasing) and scales 0..255 to 0..16, giving ``PIXELS`` FP32 [64]: what ``digits_mlp``
takes. The ``digits_jpeg`` ensemble (``ensembles/digits_jpeg``) chains the two, JPEG bytes ->
logits.

Why no antialiasing: scikit-learn's digits are ink counts of 4x4 blocks of a 32x32 bitmap. A
digit sent as a 32x32 JPEG (:func:`digit_jpeg`: each pixel a 4x4 block) is brought back by an
exact 4x linear downscale, which samples inside each block; DALI's antialiasing (a triangle
filter 4 pixels wide) blends neighbouring blocks, and then digits_mlp's held-out accuracy drops
from 0.971 to 0.962 (measured with DALI 2.4). Other sizes work too (any JPEG is resized).

Verified here, on the 450 held-out digits (``build_digits``'s split) encoded by
:func:`digit_jpeg`: the pipeline's pixels equal the digits' within ``MAX_PIXEL_DIFF`` (JPEG's
loss), batch sizes 1 and 64 run, and digits_mlp v1's recipe (trained here, exported to ONNX in
a scratch folder) classifies the pipeline's output as accurately as the raw pixels, within
``MAX_ACCURACY_LOSS``. Runs on CPU (``device_id=None``). Needs ``nvidia-dali-cuda120``
(``workbench[dali]``) and Pillow. Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import build_digits
import numpy as np

MODEL_NAME = "digits_jpeg_preprocess"
ENSEMBLE_NAME = "digits_jpeg"
#: the training recipe (train_version / export_onnx / ort_logits) lives there
RECIPE_MODULES = ("build_digits",)
INPUT_NAME = "IMAGE"
OUTPUT_NAME = "PIXELS"
MAX_BATCH_SIZE = build_digits.MAX_BATCH_SIZE
SIDE = 8
UPSCALE = 4  # a digit's JPEG is 32x32: 4x4 pixels per digits pixel, as the data set was made
JPEG_QUALITY = 90
MAX_PIXEL_DIFF = 0.5  # of 16: measured 0.16 (JPEG quality 90)
MAX_ACCURACY_LOSS = 0.01

CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
backend: "dali"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{
    name: "{INPUT_NAME}"
    data_type: TYPE_UINT8
    dims: [ -1 ]
    # JPEGs differ in length: batch them anyway, each request's bytes one DALI sample
    allow_ragged_batch: true
  }}
]
output [
  {{
    name: "{OUTPUT_NAME}"
    data_type: TYPE_FP32
    dims: [ {SIDE * SIDE} ]
  }}
]
instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
dynamic_batching {{ }}
# one decode thread: the machine's cores are shared with the classifier
parameters {{ key: "num_threads" value: {{ string_value: "1" }} }}
"""


def digit_jpeg(pixels: np.ndarray) -> bytes:
    """One digit (64 values 0..16) as a 32x32 grayscale JPEG (each pixel a 4x4 block, value
    scaled to 0..255, quality ``JPEG_QUALITY``): what a client of the ``digits_jpeg`` ensemble
    sends."""
    from PIL import Image

    gray = np.clip(np.round(np.asarray(pixels, np.float64).reshape(SIDE, SIDE) * 255 / 16), 0, 255)
    image = Image.fromarray(gray.astype(np.uint8), mode="L")
    image = image.resize((SIDE * UPSCALE, SIDE * UPSCALE), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def define_pipeline(batch_size: int):  # -> nvidia.dali.Pipeline (not built)
    """The preprocessing pipeline: ``IMAGE`` (encoded bytes) -> ``PIXELS`` FP32 [64] in 0..16."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None,
                  exec_async=False, exec_pipelined=False)
    def digits_preprocess():
        jpegs = fn.external_source(name=INPUT_NAME, dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
        images = fn.resize(images, resize_x=SIDE, resize_y=SIDE, interp_type=types.INTERP_LINEAR,
                           antialias=False, dtype=types.FLOAT)
        return fn.reshape(images * (16.0 / 255.0), shape=[SIDE * SIDE])

    return digits_preprocess()


def run_pipeline(path: Path, jpegs: list[bytes], batch_size: int = MAX_BATCH_SIZE) -> np.ndarray:
    """Run the serialized pipeline on CPU over ``jpegs`` in batches -> FP32 [n, 64]."""
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline.deserialize(filename=str(path), batch_size=batch_size, num_threads=1,
                                device_id=None, exec_async=False, exec_pipelined=False,
                                prefetch_queue_depth=1)
    pipe.build()
    rows = []
    for start in range(0, len(jpegs), batch_size):
        chunk = [np.frombuffer(j, np.uint8) for j in jpegs[start : start + batch_size]]
        pipe.feed_input(INPUT_NAME, chunk)
        (out,) = pipe.run()
        rows.append(np.stack([np.array(out[i]) for i in range(len(chunk))]))
    return np.concatenate(rows).astype(np.float32)


def build(model_dir: Path) -> tuple[str, dict]:
    """Write ``config.pbtxt`` and ``1/model.dali`` into the empty ``model_dir`` and verify them.

    Returns (one-line summary, build-info dict). Raises ``RuntimeError`` when the pixels differ
    by more than ``MAX_PIXEL_DIFF`` or the accuracy through the pipeline is more than
    ``MAX_ACCURACY_LOSS`` below the raw pixels'.
    """
    import nvidia.dali

    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    version_dir = model_dir / "1"
    version_dir.mkdir()
    path = version_dir / "model.dali"
    define_pipeline(MAX_BATCH_SIZE).serialize(filename=str(path))

    split = build_digits.load_split()
    jpegs = [digit_jpeg(row) for row in split.x_test]
    pixels = run_pipeline(path, jpegs)
    diff = float(np.abs(pixels - split.x_test).max())
    if diff > MAX_PIXEL_DIFF:
        raise RuntimeError(f"pipeline pixels differ from the digits by {diff:.3f} > {MAX_PIXEL_DIFF}")
    one = run_pipeline(path, jpegs[:1], batch_size=1)
    if not np.array_equal(one, pixels[:1]):
        raise RuntimeError("batch size 1 gives other pixels than batch size 64")

    model = build_digits.train_version(split, 1)
    with tempfile.TemporaryDirectory() as scratch:
        onnx_path = Path(scratch) / "model.onnx"
        build_digits.export_onnx(model, onnx_path)
        raw = build_digits.ort_logits(onnx_path, split.x_test).argmax(1)
        piped = build_digits.ort_logits(onnx_path, pixels).argmax(1)
    raw_accuracy = float((raw == split.y_test).mean())
    accuracy = float((piped == split.y_test).mean())
    if accuracy < raw_accuracy - MAX_ACCURACY_LOSS:
        raise RuntimeError(f"accuracy through the pipeline {accuracy:.4f} < raw pixels' "
                           f"{raw_accuracy:.4f} - {MAX_ACCURACY_LOSS}")
    summary = (
        f"DALI {nvidia.dali.__version__} pipeline (CPU): max |pixels - digits| {diff:.3f} on "
        f"{len(jpegs)} held-out 32x32 JPEGs (<= {MAX_PIXEL_DIFF}); digits_mlp v1 recipe accuracy "
        f"{accuracy:.4f} through it vs {raw_accuracy:.4f} on raw pixels; batch sizes 1 and "
        f"{MAX_BATCH_SIZE} ok"
    )
    info = {
        "max_abs_pixel_diff": diff,
        "accuracy_through_pipeline": accuracy,
        "accuracy_raw_pixels": raw_accuracy,
        "n_test": len(jpegs),
        "jpeg": {"side": SIDE * UPSCALE, "quality": JPEG_QUALITY},
    }
    return summary, info
