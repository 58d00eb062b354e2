"""Build the ``digits_openvino`` sample model: ``digits_mlp`` version 1 as OpenVINO IR.

The MLP is trained with ``build_digits``'s recipe and the seed and width of ``digits_mlp``
version 1 (the same weights as that version), exported to ONNX in a scratch folder, converted
with ``openvino.convert_model`` and saved as ``1/model.xml`` + ``1/model.bin`` (FP32 weights,
no FP16 compression) for the openvino backend. Input ``pixels`` FP32 [batch, 64], output
``logits`` FP32 [batch, 10], as digits_mlp. Verified here: OpenVINO's logits on the held-out
split equal onnxruntime's on the ONNX export within ``MAX_ABS_DIFF``, batch sizes 1 and 64
run, and the accuracy is at least 0.9. Needs the ``openvino`` package (``workbench[openvino]``).
Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import build_digits
import numpy as np

MODEL_NAME = "digits_openvino"
#: the training recipe (make_mlp / train_mlp / export_onnx) lives there
RECIPE_MODULES = ("build_digits",)
SOURCE_VERSION = 1
HIDDEN = build_digits.VERSIONS[SOURCE_VERSION]
SEED = build_digits.TRAIN_SEEDS[SOURCE_VERSION]
MAX_BATCH_SIZE = build_digits.MAX_BATCH_SIZE
MAX_ABS_DIFF = 1e-4  # OpenVINO vs onnxruntime logits on the held-out split

CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
backend: "openvino"
max_batch_size: {MAX_BATCH_SIZE}
{build_digits.io_pbtxt(build_digits.INPUT_NAME, build_digits.OUTPUT_NAME)}\
dynamic_batching {{ }}
# a 64->{HIDDEN}->10 MLP: one stream, one thread, latency first
parameters {{ key: "NUM_STREAMS" value: {{ string_value: "1" }} }}
parameters {{ key: "INFERENCE_NUM_THREADS" value: {{ string_value: "1" }} }}
parameters {{ key: "PERFORMANCE_HINT" value: {{ string_value: "LATENCY" }} }}
# FP32 math: on CPUs with AMX / AVX512-BF16 OpenVINO's CPU plugin otherwise runs in bf16
# (its default there), and the logits then differ from onnxruntime's by ~1e-1
parameters {{ key: "INFERENCE_PRECISION_HINT" value: {{ string_value: "f32" }} }}
"""


def ov_logits(path: Path, x: np.ndarray) -> np.ndarray:
    """Run the IR with OpenVINO on CPU. ``x``: FP32 [n, 64] -> logits FP32 [n, 10]."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": "1",
                                                         "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    output = compiled.output(0)
    chunks = [np.array(request.infer({build_digits.INPUT_NAME: x[i : i + MAX_BATCH_SIZE]})[output])
              for i in range(0, len(x), MAX_BATCH_SIZE)]
    return np.concatenate(chunks, axis=0)


def build(model_dir: Path) -> tuple[str, dict]:
    """Write ``config.pbtxt`` and ``1/model.xml`` + ``1/model.bin`` into the empty ``model_dir``.

    Returns (one-line summary of what was verified, build-info dict). Raises ``RuntimeError`` if
    OpenVINO's logits differ from onnxruntime's by more than ``MAX_ABS_DIFF`` or the accuracy is
    below ``MIN_ACCURACY``.
    """
    import openvino as ov

    split = build_digits.load_split()
    model = build_digits.train_version(split, SOURCE_VERSION)
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    version_dir = model_dir / "1"
    version_dir.mkdir()
    path = version_dir / "model.xml"
    with tempfile.TemporaryDirectory() as scratch:
        onnx_path = Path(scratch) / "model.onnx"
        build_digits.export_onnx(model, onnx_path)
        reference = build_digits.ort_logits(onnx_path, split.x_test)
        ov.save_model(ov.convert_model(str(onnx_path)), str(path), compress_to_fp16=False)

    diff, accuracy = build_digits.verify_logits(
        path, "OpenVINO differs from onnxruntime", ov_logits(path, split.x_test), reference,
        split.y_test, lambda n: ov_logits(path, split.x_test[:n]), MAX_ABS_DIFF)
    summary = (
        f"OpenVINO IR {ov.get_version().split('-')[0]} (digits_mlp v{SOURCE_VERSION} recipe, hidden "
        f"{HIDDEN}, seed {SEED}) accuracy on {len(split.y_test)} held-out digits {accuracy:.4f} "
        f"(>= {build_digits.MIN_ACCURACY}); max |OpenVINO - ORT| logits {diff:.1e}; "
        f"batch sizes 1 and {MAX_BATCH_SIZE} ok"
    )
    info = {
        "source": {"model": build_digits.MODEL_NAME, "version": SOURCE_VERSION, "hidden": HIDDEN,
                   "train_seed": SEED},
        "accuracy": accuracy,
        "max_abs_diff_vs_onnxruntime": diff,
        "n_test": len(split.y_test),
    }
    return summary, info
