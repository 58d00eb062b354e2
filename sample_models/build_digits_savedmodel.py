"""Build the ``digits_savedmodel`` sample model: ``digits_mlp`` version 1 as a TensorFlow SavedModel.

The MLP is trained with ``build_digits``'s recipe and the seed and width of ``digits_mlp`` version 1
(the same weights as that version); its two Linear layers' weights are copied into a ``tf.Module``
whose ``tf.function`` computes the same graph (``/16 -> dense -> relu -> dense``) and saved with
``tf.saved_model.save`` as ``1/model.savedmodel/`` with one signature, ``serving_default``:
input key ``pixels`` FP32 [-1, 64], output key ``logits`` FP32 [-1, 10] (Triton's tensorflow
backend names tensors by these keys). Verified here: the reloaded SavedModel's logits on the held-out
split equal onnxruntime's on the ONNX export of the same torch model within ``MAX_ABS_DIFF``, batch
sizes 1 and 64 run, and the accuracy is at least 0.9. Needs ``tensorflow`` (``workbench[tensorflow]``,
tensorflow-cpu). Deterministic: the weights are the torch recipe's and the files repeat byte for byte
(``fingerprint.pb``'s random uuid is fixed to the model's checksum).
Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import build_digits
import numpy as np

MODEL_NAME = "digits_savedmodel"
#: the training recipe (make_mlp / train_mlp / export_onnx) lives there
RECIPE_MODULES = ("build_digits",)
SOURCE_VERSION = 1
HIDDEN = build_digits.VERSIONS[SOURCE_VERSION]
SEED = build_digits.TRAIN_SEEDS[SOURCE_VERSION]
MAX_BATCH_SIZE = build_digits.MAX_BATCH_SIZE
MAX_ABS_DIFF = 1e-5  # TensorFlow vs onnxruntime logits on the held-out split
SIGNATURE = "serving_default"

# A full config (it loads with --disable-auto-complete-config / --strict-model-config too); the same
# inputs and outputs are what auto-complete reads from the signature (tests/backends/test_tensorflow_backend.py).
INSTANCE_NOTE = ("# KIND_CPU, not KIND_AUTO: tensorflow-cpu has no GPU, and on a machine with one KIND_AUTO "
                 "would ask for it\n")
CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
platform: "tensorflow_savedmodel"
max_batch_size: {MAX_BATCH_SIZE}
{build_digits.io_pbtxt(build_digits.INPUT_NAME, build_digits.OUTPUT_NAME, INSTANCE_NOTE)}\
dynamic_batching {{ }}
parameters {{ key: "TF_SIGNATURE_DEF" value: {{ string_value: "{SIGNATURE}" }} }}
"""


def save_savedmodel(model, path: Path) -> None:
    """Write the torch MLP ``model`` (``build_digits.make_mlp``) as a SavedModel folder ``path``."""
    import tensorflow as tf

    layers = [m for m in model if hasattr(m, "weight")]
    (w1, b1), (w2, b2) = ((m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
                          for m in layers)

    class DigitsMlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.b1 = tf.Variable(w1, name="w1"), tf.Variable(b1, name="b1")
            self.w2, self.b2 = tf.Variable(w2, name="w2"), tf.Variable(b2, name="b2")

        @tf.function(input_signature=[tf.TensorSpec([None, build_digits.N_PIXELS], tf.float32,
                                                    name=build_digits.INPUT_NAME)])
        def serve(self, pixels):
            hidden = tf.nn.relu(tf.matmul(pixels * (1.0 / build_digits.PIXEL_MAX), self.w1) + self.b1)
            return {build_digits.OUTPUT_NAME: tf.matmul(hidden, self.w2) + self.b2}

    module = DigitsMlp()
    tf.saved_model.save(module, str(path), signatures={SIGNATURE: module.serve})
    _fixed_fingerprint_uuid(path)


def _fixed_fingerprint_uuid(path: Path) -> None:
    """Make the build byte for byte repeatable: ``fingerprint.pb``'s ``uuid`` is random per save
    (everything else in the folder already repeats); it becomes the model's own checksum."""
    from tensorflow.core.protobuf import fingerprint_pb2

    fingerprint_path = path / "fingerprint.pb"
    if not fingerprint_path.is_file():
        return
    fingerprint = fingerprint_pb2.FingerprintDef()
    fingerprint.ParseFromString(fingerprint_path.read_bytes())
    fingerprint.uuid = str(fingerprint.saved_model_checksum)
    fingerprint_path.write_bytes(fingerprint.SerializeToString(deterministic=True))


def tf_logits(path: Path, x: np.ndarray) -> np.ndarray:
    """Run the SavedModel's signature. ``x``: FP32 [n, 64] -> logits FP32 [n, 10]."""
    import tensorflow as tf

    serve = tf.saved_model.load(str(path)).signatures[SIGNATURE]
    chunks = [serve(**{build_digits.INPUT_NAME: tf.constant(x[i : i + MAX_BATCH_SIZE])})
              [build_digits.OUTPUT_NAME].numpy() for i in range(0, len(x), MAX_BATCH_SIZE)]
    return np.concatenate(chunks, axis=0)


def build(model_dir: Path) -> tuple[str, dict]:
    """Write ``config.pbtxt`` and ``1/model.savedmodel/`` into the empty ``model_dir``.

    Returns (one-line summary of what was verified, build-info dict). Raises ``RuntimeError`` if
    TensorFlow's logits differ from onnxruntime's by more than ``MAX_ABS_DIFF`` or the accuracy is
    below ``build_digits.MIN_ACCURACY``.
    """
    split = build_digits.load_split()
    # torch first: TensorFlow >= 2.20 loaded before torch's triton (a torch.optim optimizer loads it)
    # crashes the process (tensorflow/tensorflow#124205; workbench.config.tensorflow_signature)
    model = build_digits.train_version(split, SOURCE_VERSION)
    import tensorflow as tf

    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    version_dir = model_dir / "1"
    version_dir.mkdir()
    path = version_dir / "model.savedmodel"
    with tempfile.TemporaryDirectory() as scratch:
        onnx_path = Path(scratch) / "model.onnx"
        build_digits.export_onnx(model, onnx_path)
        reference = build_digits.ort_logits(onnx_path, split.x_test)
    save_savedmodel(model, path)

    diff, accuracy = build_digits.verify_logits(
        path, "TensorFlow differs from onnxruntime", tf_logits(path, split.x_test), reference,
        split.y_test, lambda n: tf_logits(path, split.x_test[:n]), MAX_ABS_DIFF)
    summary = (
        f"TensorFlow SavedModel {tf.__version__} (digits_mlp v{SOURCE_VERSION} recipe, hidden {HIDDEN}, "
        f"seed {SEED}) accuracy on {len(split.y_test)} held-out digits {accuracy:.4f} "
        f"(>= {build_digits.MIN_ACCURACY}); max |TF - ORT| logits {diff:.1e}; "
        f"batch sizes 1 and {MAX_BATCH_SIZE} ok"
    )
    info = {
        "source": {"model": build_digits.MODEL_NAME, "version": SOURCE_VERSION, "hidden": HIDDEN,
                   "train_seed": SEED},
        "signature": SIGNATURE,
        "accuracy": accuracy,
        "max_abs_diff_vs_onnxruntime": diff,
        "n_test": len(split.y_test),
    }
    return summary, info
