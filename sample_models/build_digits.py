"""Build the ``digits_mlp`` sample model: a small MLP trained on scikit-learn's bundled digits data.

Two versions (``1/model.onnx`` hidden=32, ``2/model.onnx`` hidden=64) are trained at build time with
fixed seeds on one CPU thread, exported with the TorchScript ONNX exporter and verified with
onnxruntime on the held-out split. Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODEL_NAME = "digits_mlp"
INPUT_NAME = "pixels"
OUTPUT_NAME = "logits"
N_PIXELS = 64
N_CLASSES = 10
PIXEL_MAX = 16.0  # digits pixels are integers in 0..16; the graph divides by this
MAX_BATCH_SIZE = 64
OPSET = 17
MIN_ACCURACY = 0.9

SPLIT_SEED = 0  # train_test_split(..., test_size=0.25, random_state=0), as in examples/classify_digits.py
TEST_SIZE = 0.25
EPOCHS = 60
BATCH_SIZE = 32
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-4

# version -> hidden width
VERSIONS: dict[int, int] = {1: 32, 2: 64}
TRAIN_SEEDS: dict[int, int] = {1: 1, 2: 2}


def io_pbtxt(input_name: str, output_name: str, instance_note: str = "") -> str:
    """The ``input`` / ``output`` / ``instance_group`` part of a digits sample's config.pbtxt:
    FP32 ``[64]`` pixels in, FP32 ``[10]`` logits out, one KIND_CPU instance (``instance_note``:
    a comment line put before the instance group). Every digits sample (ONNX, TorchScript,
    OpenVINO, SavedModel) writes this text."""
    return f"""\
input [
  {{
    name: "{input_name}"
    data_type: TYPE_FP32
    dims: [ {N_PIXELS} ]
  }}
]
output [
  {{
    name: "{output_name}"
    data_type: TYPE_FP32
    dims: [ {N_CLASSES} ]
  }}
]
{instance_note}instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
"""


CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
backend: "onnxruntime"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
version_policy: {{ latest {{ num_versions: {len(VERSIONS)} }} }}
{io_pbtxt(INPUT_NAME, OUTPUT_NAME)}\
# One instance: on 2 cores a second one only adds contention. Batch whatever queued while
# the instance was busy, with no added delay: 2x at c=16, while any delay costs c=1
# 25-75 % (bench/RESULTS.md, issue 3).
dynamic_batching {{ }}
# a 64->hidden->10 MLP gains nothing from an intra-op thread pool
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
"""


@dataclass(frozen=True)
class DigitsSplit:
    """The fixed digits split. ``x_*``: float32 [n, 64], raw pixels 0..16; ``y_*``: int64 [n], 0..9."""

    x_train: np.ndarray
    x_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class VersionResult:
    """What was verified for one exported version."""

    version: int
    hidden: int
    accuracy: float
    n_test: int
    max_abs_diff_vs_torch: float


def load_split() -> DigitsSplit:
    """Load ``sklearn.datasets.load_digits`` and split it 75/25 with ``random_state=0``.

    Returns float32 pixels [n, 64] (unscaled, 0..16) and int64 labels [n].
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_SIZE, random_state=SPLIT_SEED
    )
    return DigitsSplit(
        x_train=x_train.astype(np.float32),
        x_test=x_test.astype(np.float32),
        y_train=y_train.astype(np.int64),
        y_test=y_test.astype(np.int64),
    )


def make_mlp(hidden: int):  # -> torch.nn.Module
    """MLP: pixels FP32 [batch, 64] (0..16) -> /16 -> Linear(64, hidden) -> ReLU -> Linear(hidden, 10).

    The pixel scaling is part of the module, so it ends up inside the exported graph.
    """
    import torch

    class _Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (1.0 / PIXEL_MAX)

    return torch.nn.Sequential(
        _Scale(),
        torch.nn.Linear(N_PIXELS, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, N_CLASSES),
    )


def train_mlp(split: DigitsSplit, hidden: int, seed: int):  # -> torch.nn.Module
    """Train ``make_mlp(hidden)`` with Adam + cross-entropy; deterministic for a given seed.

    Uses ``torch.manual_seed(seed)`` for the initial weights and a seeded ``torch.Generator`` for
    the mini-batch order. Call with ``torch.set_num_threads(1)`` in effect for bitwise repeatability.
    Returns the model in eval mode.
    """
    import torch

    torch.manual_seed(seed)
    model = make_mlp(hidden)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.from_numpy(split.x_train)
    y = torch.from_numpy(split.y_train)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            opt.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def export_onnx(model, path: Path) -> None:
    """Export ``model`` (FP32 [batch, 64] -> FP32 [batch, 10]) to ONNX with a dynamic batch axis.

    Uses the TorchScript exporter (``dynamo=False``), opset 17, input ``pixels``, output ``logits``.
    """
    import torch

    example = torch.zeros(2, N_PIXELS, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but still supported
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def check_signature(path: Path) -> None:
    """Raise ``RuntimeError`` unless the ONNX file maps pixels FP32 [batch, 64] -> logits FP32 [batch, 10]."""
    import onnx

    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    want = {
        INPUT_NAME: ("input", N_PIXELS),
        OUTPUT_NAME: ("output", N_CLASSES),
    }
    got = {}
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_param or d.dim_value for d in t.shape.dim]
            if t.elem_type != onnx.TensorProto.FLOAT or len(dims) != 2 or not isinstance(dims[0], str):
                raise RuntimeError(f"{path}: {kind} {v.name} has dtype {t.elem_type} dims {dims}")
            got[v.name] = (kind, dims[1])
    if got != want:
        raise RuntimeError(f"{path}: ONNX signature {got} != expected {want}")


def ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    """Run the exported model with onnxruntime. ``x``: FP32 [n, 64] (0..16) -> logits FP32 [n, 10]."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    chunks = [
        sess.run([OUTPUT_NAME], {INPUT_NAME: x[i : i + MAX_BATCH_SIZE]})[0]
        for i in range(0, len(x), MAX_BATCH_SIZE)
    ]
    return np.concatenate(chunks, axis=0)


def build_version(split: DigitsSplit, version: int, version_dir: Path) -> VersionResult:
    """Train, export and verify one version into ``version_dir/model.onnx``.

    Raises ``RuntimeError`` if the onnxruntime test accuracy is below ``MIN_ACCURACY``.
    """
    import torch

    hidden = VERSIONS[version]
    model = train_mlp(split, hidden, TRAIN_SEEDS[version])
    version_dir.mkdir(parents=True)
    path = version_dir / "model.onnx"
    export_onnx(model, path)
    check_signature(path)

    logits = ort_logits(path, split.x_test)
    with torch.no_grad():
        ref = model(torch.from_numpy(split.x_test)).numpy()
    accuracy = float((logits.argmax(axis=1) == split.y_test).mean())
    result = VersionResult(
        version=version,
        hidden=hidden,
        accuracy=accuracy,
        n_test=len(split.y_test),
        max_abs_diff_vs_torch=float(np.abs(logits - ref).max()),
    )
    if accuracy < MIN_ACCURACY:
        raise RuntimeError(
            f"v{version}: onnxruntime test accuracy {accuracy:.4f} < {MIN_ACCURACY}"
        )
    return result


def train_version(split: DigitsSplit, version: int):  # -> torch.nn.Module
    """``digits_mlp`` ``version``'s MLP (its width and seed), trained with one torch thread so the
    weights are bitwise those of that version (for samples serving the same model elsewhere)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_mlp(split, VERSIONS[version], TRAIN_SEEDS[version])
    finally:
        torch.set_num_threads(threads)


def verify_logits(path: Path, what: str, logits: np.ndarray, reference: np.ndarray, y_test: np.ndarray,
                  run_batch, max_abs_diff: float) -> tuple[float, float]:
    """Check a converted digits model: ``run_batch(n)`` (its logits for the first ``n`` test rows)
    gives [n, 10] for n = 1 and MAX_BATCH_SIZE, ``logits`` (FP32 [n_test, 10]) are within
    ``max_abs_diff`` of ``reference`` and the accuracy is at least MIN_ACCURACY.

    Returns (max abs diff, accuracy). Raises ``RuntimeError`` naming ``path`` and ``what``.
    """
    for size in (1, MAX_BATCH_SIZE):
        shape = tuple(run_batch(size).shape)
        if shape != (size, N_CLASSES):
            raise RuntimeError(f"{path}: batch of {size} gave shape {shape}")
    diff = float(np.abs(logits - reference).max())
    accuracy = float((logits.argmax(axis=1) == y_test).mean())
    if diff > max_abs_diff:
        raise RuntimeError(f"{path}: {what} by {diff:.1e} > {max_abs_diff}")
    if accuracy < MIN_ACCURACY:
        raise RuntimeError(f"{path}: accuracy {accuracy:.4f} < {MIN_ACCURACY}")
    return diff, accuracy


def build(model_dir: Path) -> tuple[str, dict]:
    """Write the whole ``digits_mlp`` model folder (config.pbtxt, 1/model.onnx, 2/model.onnx) into ``model_dir``.

    ``model_dir`` must exist and be empty. Returns (one-line summary of what was verified, build-info dict).
    Raises ``RuntimeError`` if a version fails verification.
    """
    import torch

    split = load_split()
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise-reproducible training
    try:
        results = [build_version(split, v, model_dir / str(v)) for v in sorted(VERSIONS)]
    finally:
        torch.set_num_threads(threads)
    accuracies = ", ".join(f"v{r.version} (hidden {r.hidden}) {r.accuracy:.4f}" for r in results)
    worst_diff = max(r.max_abs_diff_vs_torch for r in results)
    summary = (
        f"onnxruntime accuracy on {results[0].n_test} held-out digits: {accuracies} (>= {MIN_ACCURACY}); "
        f"max |ORT - torch| logits {worst_diff:.1e}"
    )
    info = {
        "split": {"test_size": TEST_SIZE, "random_state": SPLIT_SEED, "n_test": len(split.y_test)},
        "versions": {
            str(r.version): {
                "hidden": r.hidden,
                "train_seed": TRAIN_SEEDS[r.version],
                "accuracy": r.accuracy,
                "max_abs_diff_vs_torch": r.max_abs_diff_vs_torch,
            }
            for r in results
        },
    }
    return summary, info
