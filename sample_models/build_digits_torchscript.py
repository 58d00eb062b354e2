"""Build the ``digits_torchscript`` sample model: ``digits_mlp`` version 1 as TorchScript.

The MLP is trained with ``build_digits``'s recipe and the seed and width of ``digits_mlp`` version 1
(so it holds the same weights as that version, bit for bit on the same torch), traced with
``torch.jit.trace`` and saved as ``1/model.pt`` for the pytorch backend (``platform:
"pytorch_libtorch"``). Its input and output use Triton's TorchScript naming, ``INPUT__0`` and
``OUTPUT__0``. Verified here: the saved file reloads with one tensor argument and one tensor
result, equals the torch model on the held-out split, handles batch sizes 1 and 64, and keeps an
accuracy of at least 0.9. Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import build_digits

MODEL_NAME = "digits_torchscript"
#: the training recipe (make_mlp / train_mlp / load_split) lives there
RECIPE_MODULES = ("build_digits",)
INPUT_NAME = "INPUT__0"
OUTPUT_NAME = "OUTPUT__0"
SOURCE_VERSION = 1  # digits_mlp version whose width and seed are used
HIDDEN = build_digits.VERSIONS[SOURCE_VERSION]
SEED = build_digits.TRAIN_SEEDS[SOURCE_VERSION]
MAX_BATCH_SIZE = build_digits.MAX_BATCH_SIZE
MAX_ABS_DIFF = 1e-5  # TorchScript vs the eager module on the held-out split

CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
platform: "pytorch_libtorch"
max_batch_size: {MAX_BATCH_SIZE}
# Triton's TorchScript naming: INPUT__<i> is forward()'s i-th argument, OUTPUT__<i> its i-th result
{build_digits.io_pbtxt(INPUT_NAME, OUTPUT_NAME)}\
dynamic_batching {{ }}
# a 64->{HIDDEN}->10 MLP gains nothing from an intra-op thread pool (torch's pool is process-wide:
# the first pytorch model that sets it wins)
parameters {{ key: "INTRA_OP_THREAD_COUNT" value: {{ string_value: "1" }} }}
"""


def export_torchscript(model, path: Path) -> None:
    """Trace ``model`` (FP32 [batch, 64] -> FP32 [batch, 10]) and save it as TorchScript."""
    import torch

    example = torch.zeros(2, build_digits.N_PIXELS, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 deprecates TorchScript; Triton still serves it
        traced = torch.jit.trace(model, (example,))
        traced.save(str(path))


def load_torchscript(path: Path):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.load(str(path), map_location="cpu").eval()


def check_signature(module, path: Path) -> None:
    """Raise ``RuntimeError`` unless forward() takes one Tensor and returns one Tensor."""
    schema = module.forward.schema
    arguments = [a for a in schema.arguments if a.type.kind() != "ClassType"]
    returns = [r.type.kind() for r in schema.returns]
    if [a.type.kind() for a in arguments] != ["TensorType"] or returns != ["TensorType"]:
        raise RuntimeError(f"{path}: forward() is {schema}, expected (Tensor) -> Tensor")


def build(model_dir: Path) -> tuple[str, dict]:
    """Write ``config.pbtxt`` and ``1/model.pt`` into the empty ``model_dir``.

    Returns (one-line summary of what was verified, build-info dict). Raises ``RuntimeError`` if the
    TorchScript file disagrees with the torch model or the accuracy is below ``MIN_ACCURACY``.
    """
    import torch

    split = build_digits.load_split()
    model = build_digits.train_version(split, SOURCE_VERSION)
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    version_dir = model_dir / "1"
    version_dir.mkdir()
    path = version_dir / "model.pt"
    export_torchscript(model, path)

    loaded = load_torchscript(path)
    check_signature(loaded, path)
    x = torch.from_numpy(split.x_test)
    with torch.no_grad():
        diff, accuracy = build_digits.verify_logits(
            path, "TorchScript differs from the torch model", loaded(x).numpy(), model(x).numpy(),
            split.y_test, lambda n: loaded(x[:n]), MAX_ABS_DIFF)
    summary = (
        f"TorchScript (traced digits_mlp v{SOURCE_VERSION} recipe, hidden {HIDDEN}, seed {SEED}) "
        f"accuracy on {len(split.y_test)} held-out digits {accuracy:.4f} (>= {build_digits.MIN_ACCURACY}); "
        f"max |TorchScript - torch| logits {diff:.1e}; batch sizes 1 and {MAX_BATCH_SIZE} ok"
    )
    info = {
        "source": {"model": build_digits.MODEL_NAME, "version": SOURCE_VERSION, "hidden": HIDDEN,
                   "train_seed": SEED},
        "accuracy": accuracy,
        "max_abs_diff_vs_torch": diff,
        "n_test": len(split.y_test),
    }
    return summary, info
