"""Build the ``minilm_encoder`` sample model with two versions: 1, the float32 all-MiniLM-L6-v2
graph of ``build_minilm``, and 2, the same graph dynamically quantised (onnxruntime's
``quantize_dynamic``: INT8 weights, per output channel; activations quantised at run time), a
smaller and faster candidate whose embeddings differ a little, so a rollout's mirror has
something to measure (``docs/rollouts.md``).

Version 1 stays the served default: the config's ``version_policy`` is
``specific { versions: [ 1 ] }``, because Triton (and the workbench) send an unversioned request
to the highest READY version, and every test, notebook and the ``text_embedder`` ensemble
(``model_version: -1``) expects version 1's float32 answers. Version 2 is on disk, loadable for a
rollout: pin the unversioned traffic first, then load both versions, e.g.::

    await server.rollouts.set("minilm_encoder", {1: 1})            # unversioned -> v1
    await server.load_model("minilm_encoder", config={"version_policy": {"specific": {"versions": [1, 2]}}})
    await server.rollouts.set("minilm_encoder", {1: 1}, candidate=2, mirror_percent=100)

A separate module from ``build_minilm`` so that ``text_classifier`` and ``text_embedder``, whose
recipes name ``build_minilm``, are not rebuilt for it. The build fails unless version 2 keeps the
meaning of the embeddings (see :data:`MIN_COSINE`). Used by ``build.py``; see
``sample_models/README.md``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import build_minilm
import numpy as np

MODEL_NAME = build_minilm.MODEL_NAME
RECIPE_MODULES = ("build_minilm",)
#: the version folder of the quantised copy
QUANTISED_VERSION = 2
#: the least cosine between a sentence's v1 and v2 embeddings the build accepts (measured: 0.989
#: on the short verify sentences; over workbench.testing.sentences 0.981 one at a time and 0.971 in
#: one padded batch, where per-tensor quantisation, not per channel, falls to 0.89)
MIN_COSINE = 0.95

CONFIG_PBTXT = build_minilm.CONFIG_PBTXT.replace(
    'platform: "onnxruntime_onnx"\n',
    'platform: "onnxruntime_onnx"\n'
    "# version 2 (INT8 weights, build_minilm_versions.py) is on disk for a rollout; version 1 serves\n"
    "version_policy: { specific { versions: [ 1 ] } }\n",
    1,
)


def quantise(source: Path, target: Path) -> None:
    """Write ``source``'s graph with INT8 weights (per output channel) to ``target``
    (``onnxruntime.quantization.quantize_dynamic``; the same bytes on every run)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "consider to run pre-processing": not needed for a BERT graph here
    try:
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


def compare(float_model: Path, int8_model: Path, folder: Path) -> dict[str, float]:
    """Cosine of each short verify sentence's v1 and v2 embeddings (min and mean), their max absolute
    difference, and v2's cos(food, bread) / cos(food, violin), on onnxruntime.

    Raises:
        RuntimeError: a cosine below :data:`MIN_COSINE`, or v2 no longer ranks the related pair
            above the unrelated one.
    """
    feeds = build_minilm.tokenize(folder, build_minilm.VERIFY_SENTENCES[:-1])  # not the 256-token passage
    ones = build_minilm.open_session(float_model).run([build_minilm.EMBEDDING_OUTPUT], feeds)[0]
    twos = build_minilm.open_session(int8_model).run([build_minilm.EMBEDDING_OUTPUT], feeds)[0]
    cosine = (ones * twos).sum(axis=1)  # both L2-normalised
    figures = {"cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean()),
               "max_abs_diff": float(np.abs(ones - twos).max()),
               "cos_food_bread": float(twos[0] @ twos[1]), "cos_food_violin": float(twos[0] @ twos[4])}
    if figures["cosine_min"] < MIN_COSINE:
        raise RuntimeError(f"the INT8 version's embeddings drift: cosine to version 1 down to "
                           f"{figures['cosine_min']:.3f} < {MIN_COSINE}")
    if figures["cos_food_bread"] <= figures["cos_food_violin"]:
        raise RuntimeError(f"the INT8 version's embeddings lost their meaning: {figures}")
    return figures


def build(model_dir: Path) -> tuple[str, dict]:
    """Write ``minilm_encoder`` (``build_minilm.build``: version 1 and the tokenizer files), then
    version 2 quantised from version 1 and the config with its version policy, into the empty
    ``model_dir``. Returns (summary, build-info dict); RuntimeError if a verification fails."""
    summary, info = build_minilm.build(model_dir)
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    version_dir = model_dir / str(QUANTISED_VERSION)
    version_dir.mkdir()
    float_model = model_dir / "1" / "model.onnx"
    quantise(float_model, version_dir / "model.onnx")
    figures = compare(float_model, version_dir / "model.onnx", build_minilm.source_dir())
    sizes = [(d / "model.onnx").stat().st_size / 2**20 for d in (model_dir / "1", version_dir)]
    summary += (f"; version 2 (INT8 weights, {sizes[1]:.0f} MB of {sizes[0]:.0f}): cosine to version 1 "
                f"min {figures['cosine_min']:.3f} mean {figures['cosine_mean']:.3f}")
    info["version_2"] = {"quantisation": "onnxruntime quantize_dynamic, QInt8 weights, per channel",
                         "size_bytes": (version_dir / "model.onnx").stat().st_size, **figures}
    return summary, info
