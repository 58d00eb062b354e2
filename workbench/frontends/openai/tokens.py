"""Token counts for OpenAI's ``usage``, by the model's own tokenizer (the ``tokenizers`` library).

The model's tokenizer is its ``tokenizer.json`` (Hugging Face's format), found in this order:

1. the model-config parameter ``openai_tokenizer``: a path relative to the model's folder;
2. ``<model>/tokenizer.json``, then ``<model>/<version>/tokenizer.json`` (highest version first);
3. for an ensemble, the same two places in its first step's model (``text_embedder``'s
   ``tokenizer`` step).

A ``sentence_bert_config.json`` beside it gives ``max_seq_length``: an embedding's count is then
truncated there, as sentence-transformers (and the sample ``tokenizer`` model) truncate, so the
count is the tokens the encoder saw, [CLS] and [SEP] included. A prompt's count (completions)
has no special tokens and no truncation (a long prompt is counted in pieces,
:func:`pieces_count`). Without a tokenizer the counts are 0 (documented).

Counting re-tokenizes the text in a worker thread, after the model answered (the Rust tokenizer:
about 10-50 µs per short sentence; a long text is counted on a prefix, :func:`truncated_count`);
the tokenizer is loaded once per file and kept while the file is unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench import Server, WorkbenchError

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
SENTENCE_CONFIG = "sentence_bert_config.json"


class TokenCounter:
    """Counts tokens with a loaded ``tokenizers.Tokenizer``; ``max_length``: truncation of an
    embedding's count (tokens), None for none."""

    def __init__(self, path: Path, max_length: int | None) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self.max_length = max_length
        self._lock = threading.Lock()  # a Tokenizer's settings are not per call
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    def embedding_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the encoder sees them: special tokens, truncated at
        ``max_length`` (texts stripped, as sentence-transformers strips them). With
        ``max_length``, a long text is counted on a prefix (:func:`truncated_count`)."""
        with self._lock:
            if self.max_length:
                return [truncated_count(t.strip(), self.max_length, self._count) for t in texts]
            return [len(e.ids) for e in self._tokenizer.encode_batch([t.strip() for t in texts])]

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text).ids)

    def prompt_tokens(self, text: str) -> int:
        """Tokens of a prompt: no special tokens, no truncation; a prompt over
        :data:`PROMPT_PIECE` characters is counted piece by piece (:func:`pieces_count`)."""
        def count(piece: str) -> int:
            with self._lock:
                return len(self._tokenizer.encode(piece, add_special_tokens=False).ids)

        return pieces_count(text, count)


#: the first prefix of a long text counted, characters (grown fourfold while it is short of
#: ``max_length`` tokens)
FIRST_WINDOW = 4096
#: everything up to the last whitespace (a prefix ending there tokenizes as the whole text's start)
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.DOTALL)


def truncated_count(text: str, max_length: int, count: Callable[[str], int]) -> int:
    """``min(count(text), max_length)``, with ``count`` given only a prefix of a long text.

    A prefix of :data:`FIRST_WINDOW` characters cut after its last whitespace tokenizes to the
    same first tokens as the whole text; when it already has ``max_length`` tokens, so has the
    text. Otherwise the window grows fourfold, up to the whole text. So a 1 MiB text costs a
    4 KiB tokenization, not 4 s and hundreds of MB (an 8 MiB text took 31.5 s and 1.5 GB whole).
    """
    window = FIRST_WINDOW
    while len(text) > window:
        match = _UP_TO_LAST_SPACE.match(text, 0, window)
        if match is not None and count(text[: match.end()]) >= max_length:
            return max_length
        window *= 4
    return min(count(text), max_length)


#: the largest piece of a prompt tokenized at once, characters
PROMPT_PIECE = 64 * 1024


def pieces_count(text: str, count: Callable[[str], int]) -> int:
    """The sum of ``count`` over pieces of ``text`` of at most :data:`PROMPT_PIECE` characters,
    each cut after its last whitespace (when it has one): the memory of a count stays that of
    one piece (a whole 8 MiB text took 1.5 GB). Exact for tokenizers that split words at
    whitespace (WordPiece, the samples'); a byte-level BPE may differ by a token per piece."""
    total, start = 0, 0
    while start < len(text):
        end = start + PROMPT_PIECE
        if end < len(text):
            match = _UP_TO_LAST_SPACE.match(text, start, end)
            end = match.end() if match is not None else end
        total += count(text[start:end])
        start = end
    return total


def _max_length(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / SENTENCE_CONFIG).read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _in_model_folder(folder: Path) -> Path | None:
    if (folder / TOKENIZER_FILE).is_file():
        return folder / TOKENIZER_FILE
    versions = sorted((p for p in folder.iterdir() if p.name.isdigit() and p.is_dir()),
                      key=lambda p: int(p.name), reverse=True) if folder.is_dir() else []
    return next((v / TOKENIZER_FILE for v in versions if (v / TOKENIZER_FILE).is_file()), None)


class TokenCounters:
    """The token counter of each model (None: no tokenizer found), cached per tokenizer file
    and its modification time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._cache: dict[tuple[str, int], TokenCounter] = {}

    async def for_model(self, name: str, config: dict[str, Any]) -> TokenCounter | None:
        """The counter of model ``name`` (its JSON ``config``), or None when it has no
        tokenizer the module docstring's rules find."""
        path = await self._find(name, config)
        if path is None:
            return None
        return await asyncio.to_thread(self._load, path)

    def _load(self, path: Path) -> TokenCounter | None:
        try:
            key = (str(path), path.stat().st_mtime_ns)
            if key not in self._cache:
                self._cache = {k: v for k, v in self._cache.items() if k[0] != key[0]}
                self._cache[key] = TokenCounter(path, _max_length(path.parent))
            return self._cache[key]
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a bad file; counts become 0
            log.warning("cannot load the tokenizer %s: %s", path, exc)
            return None

    async def _folder(self, name: str) -> Path | None:
        try:
            return Path((await self.server.config_files.model_config_file(name))["path"]).parent
        except WorkbenchError:
            return None

    async def _find(self, name: str, config: dict[str, Any]) -> Path | None:
        folder = await self._folder(name)
        if folder is None:
            return None
        named = config.get("parameters", {}).get("openai_tokenizer", {}).get("string_value")
        if named:
            path = (folder / named).resolve()
            return path if path.is_relative_to(folder.resolve()) and path.is_file() else None
        found = await asyncio.to_thread(_in_model_folder, folder)
        steps = config.get("ensemble_scheduling", {}).get("step", [])
        if found is None and steps:
            first = steps[0].get("model_name", "")
            step_folder = await self._folder(first)
            if step_folder is not None:
                found = await asyncio.to_thread(_in_model_folder, step_folder)
        return found


__all__ = ["FIRST_WINDOW", "PROMPT_PIECE", "TokenCounter", "TokenCounters", "pieces_count", "truncated_count"]
