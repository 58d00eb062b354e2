"""Real English sentences for the text sample models (tokenizer, text_embedder, ensemble_pipeline,
token_streamer): offline checks, served tests and perf_analyzer ``--input-data``.

    python -m workbench.testing.sentences bench/data   # writes sentences.json and raw_text.json

Lengths vary on purpose (3 to 60+ word pieces, plus one passage longer than the 256-token
truncation), and a few use punctuation, digits and accented letters, so padding to the longest
sentence of a batch and truncation are both exercised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: two sentences that mean nearly the same thing (cosine of their embeddings > 0.7)
PARAPHRASE_PAIR = ("How do I reset my password?", "What are the steps to change my password?")
#: two sentences about unrelated things (cosine < 0.2)
UNRELATED_PAIR = ("How do I reset my password?", "The violinist played a quiet piece by Bach.")

_LONG = (
    "Inference servers receive requests from many clients at once. A dynamic batcher waits a few "
    "milliseconds so that requests for the same model can run together as one batch, which uses the "
    "processor far better than running each request alone; the price is a little added latency. "
)

SENTENCES: tuple[str, ...] = (
    *PARAPHRASE_PAIR,
    UNRELATED_PAIR[1],
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Hi!",
    "The new movie is awesome and the audience loved every minute of it.",
    "It is raining heavily in the city this evening.",
    "She bought three apples and a loaf of bread at the market for 4.50 euros.",
    "What is the capital city of Australia?",
    "Le café près de la gare ouvre à sept heures.",
    "The model repository holds one folder per model, with a configuration file and numbered versions.",
    "I love this, it is wonderful",
    "This is terrible and I hate it",
    "  Leading and trailing spaces are ignored by the tokenizer.  ",
    _LONG * 5,  # 282 word pieces: truncated at 256
)

#: the names the sample models give their BYTES text input
TEXT_INPUTS = {"sentences.json": "TEXT", "raw_text.json": "RAW_TEXT"}


def perf_analyzer_input_data(input_name: str = "TEXT", sentences: tuple[str, ...] = SENTENCES) -> dict:
    """perf_analyzer ``--input-data`` JSON: one entry per sentence, ``input_name`` BYTES of shape [1].

    Args:
        input_name: the model's text input (``TEXT`` for tokenizer, text_embedder and
            token_streamer; ``RAW_TEXT`` for ensemble_pipeline).
        sentences: the strings to send, round-robin.
    """
    return {"data": [{input_name: {"content": [s], "shape": [1]}} for s in sentences]}


def write_input_data(folder: Path) -> list[Path]:
    """Write every file of :data:`TEXT_INPUTS` into ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, input_name in TEXT_INPUTS.items():
        path = folder / filename
        path.write_text(json.dumps(perf_analyzer_input_data(input_name), indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_input_data(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/data")):
        print(written_path)
