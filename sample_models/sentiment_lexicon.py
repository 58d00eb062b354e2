"""The labelled training set of ``text_classifier``'s head: TextBlob's English sentiment lexicon.

TextBlob's wheel ships ``textblob/en/en-sentiment.xml`` (De Smedt & Daelemans' subjectivity lexicon,
version 1.3, public domain: PDDL): 2,918 senses of English adjectives, each tagged by hand with a
polarity in [-1, 1], a subjectivity in [0, 1] and (most of them) a one-line WordNet definition. The
file is read from the installed distribution, without importing textblob (which imports nltk) and
without any download. Each sense becomes one example ``"<form>: <definition>"`` labelled

* negative: polarity <= -0.1; positive: polarity >= 0.1;
* neutral: |polarity| < 0.1 and subjectivity <= 0.3 (objective senses); the rest (subjective but
  neither clearly negative nor positive) is left out.

Examples whose text occurs with two different labels are dropped, repeats kept once. The held-out
split is by word form (a fixed hash of the form, one in ``TEST_FOLDS``), so all senses of a word are
on one side and the held-out accuracy measures words the head never saw. Used by
``build_text_classifier``.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "textblob"
LEXICON_PATH = "textblob/en/en-sentiment.xml"
LABELS = ("negative", "neutral", "positive")
POLARITY_THRESHOLD = 0.1
NEUTRAL_MAX_SUBJECTIVITY = 0.3
#: a form is held out when sha256(form) % TEST_FOLDS == 0: about a fifth of the words
TEST_FOLDS = 5


@dataclass(frozen=True)
class Example:
    """One lexicon sense: ``text`` ("<form>: <definition>"), ``label`` (index into ``LABELS``), the form."""

    text: str
    label: int
    form: str

    @property
    def held_out(self) -> bool:
        """Whether this example belongs to the held-out split (fixed by the form, not by a random draw)."""
        return int(hashlib.sha256(self.form.encode()).hexdigest(), 16) % TEST_FOLDS == 0


def lexicon_file() -> Path:
    """Path of ``en-sentiment.xml`` in the installed textblob distribution.

    Raises ``RuntimeError`` if textblob (the ``samples`` extra) is not installed or lacks the file.
    """
    try:
        path = Path(str(metadata.distribution(DISTRIBUTION).locate_file(LEXICON_PATH)))
    except metadata.PackageNotFoundError as exc:
        raise RuntimeError("package textblob is not installed (pip install textblob; in the samples extra)") from exc
    if not path.is_file():
        raise RuntimeError(f"{path} is missing; reinstall textblob")
    return path


def version() -> str:
    """Installed version of the textblob distribution."""
    return metadata.version(DISTRIBUTION)


def label_of(polarity: float, subjectivity: float) -> int | None:
    """Index into ``LABELS`` for a sense's polarity and subjectivity, or None if it is left out."""
    if polarity <= -POLARITY_THRESHOLD:
        return 0
    if polarity >= POLARITY_THRESHOLD:
        return 2
    if subjectivity <= NEUTRAL_MAX_SUBJECTIVITY:
        return 1
    return None


def load_examples(path: Path | None = None) -> list[Example]:
    """The labelled examples of the lexicon at ``path`` (default ``lexicon_file()``), in file order.

    Raises ``RuntimeError`` if the file does not parse or holds no ``<word>`` entries.
    """
    path = path or lexicon_file()
    try:
        words = ET.parse(path).getroot().findall("word")
    except ET.ParseError as exc:
        raise RuntimeError(f"{path}: {exc}") from exc
    if not words:
        raise RuntimeError(f"{path} holds no <word> entries")
    labels: dict[str, set[int]] = {}
    first: dict[str, Example] = {}
    for word in words:
        label = label_of(float(word.get("polarity", "0")), float(word.get("subjectivity", "0")))
        if label is None:
            continue
        form, sense = word.get("form", "").strip(), (word.get("sense") or "").strip()
        if not form:
            continue
        text = f"{form}: {sense}" if sense else form
        labels.setdefault(text, set()).add(label)
        first.setdefault(text, Example(text, label, form))
    return [example for text, example in first.items() if len(labels[text]) == 1]
