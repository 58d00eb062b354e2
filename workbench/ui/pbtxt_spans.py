"""Where each top-level field of a ``config.pbtxt`` text is, so one field can be rewritten
while every other line (comments, layout) stays as the user wrote it.

``google.protobuf.text_format`` parses and prints whole messages and drops comments; the
config editor's form controls change a few fields, and the diff against the file should show
only those lines. :func:`top_level_spans` walks the text with the lexical rules of the text
format (``#`` comments, quoted strings, ``{}`` / ``<>`` / ``[]`` nesting) and returns the span
of each top-level ``field: value`` / ``field { ... }``; :func:`replace_fields` swaps spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\[[A-Za-z0-9_./]+\]")
_SCALAR = re.compile(r"[^\s,;{}\[\]<>#:\"']+")
_CLOSING = {"{": "}", "<": ">", "[": "]"}


@dataclass(frozen=True, slots=True)
class Span:
    """One top-level field occurrence: ``text[start:end]`` is ``name ...value`` (with a
    trailing ``,`` / ``;`` separator when there is one)."""

    name: str
    start: int
    end: int


def top_level_spans(text: str) -> list[Span]:
    """The top-level fields of ``text`` in order (a repeated field once per occurrence).

    Raises:
        ValueError: ``text`` is not lexically a text-format message (unbalanced brackets, an
            unterminated string, a value missing); parse it with ``text_format`` first.
    """
    spans = []
    i = _skip(text, 0)
    while i < len(text):
        match = _NAME.match(text, i)
        if match is None:
            raise ValueError(f"expected a field name at offset {i}")
        j = _skip(text, match.end())
        if j < len(text) and text[j] == ":":
            j = _skip(text, j + 1)
        end = _value_end(text, j)
        k = _skip(text, end)
        if k < len(text) and text[k] in ",;":
            end = k + 1
        spans.append(Span(match.group(), i, end))
        i = _skip(text, end)
    return spans


def replace_fields(text: str, fields: dict[str, str]) -> str:
    """``text`` with each named top-level field replaced by new text.

    Args:
        text: a config text that parses.
        fields: field name -> its new text (one or more complete ``name ...`` entries ending
            with a newline, as ``text_format.MessageToString`` prints them; "" removes the
            field). The first occurrence is replaced in place and later ones (a repeated
            field written as several entries) are removed, whole lines where they sit alone;
            a field not in ``text`` is appended at the end.

    Raises:
        ValueError: as :func:`top_level_spans`.
    """
    spans = [s for s in top_level_spans(text) if s.name in fields]
    placed: set[str] = set()
    pieces = []
    cursor = 0
    for span in spans:
        start, end = _whole_lines(text, span.start, span.end)
        pieces.append(text[cursor:start])
        if span.name not in placed:
            replacement = fields[span.name]
            if start == span.start and end == span.end:  # shares its line with other text
                replacement = replacement.rstrip("\n")
            pieces.append(replacement)
            placed.add(span.name)
        cursor = end
    pieces.append(text[cursor:])
    result = "".join(pieces)
    for name, replacement in fields.items():
        if name not in placed and replacement:
            if result and not result.endswith("\n"):
                result += "\n"
            result += replacement
    return result


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen ``[start, end)`` to whole lines (with the newline) when nothing but blanks
    shares them; otherwise return it as it is."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    before, after = text[line_start:start], text[end:line_end]
    if before.strip() or after.strip():  # e.g. a comment after the value stays, on its line
        return start, end
    return line_start, line_end


def _skip(text: str, i: int) -> int:
    """Past blanks and ``#`` comments."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text[i] == "#":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline + 1
        else:
            break
    return i


def _string_end(text: str, i: int) -> int:
    quote = text[i]
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == quote:
            return i + 1
        elif text[i] == "\n":
            break
        else:
            i += 1
    raise ValueError("unterminated string")


def _value_end(text: str, i: int) -> int:
    """The end of the value starting at ``i``: a bracketed block, adjacent strings, or one
    scalar token (number, enum name, identifier)."""
    if i >= len(text):
        raise ValueError("a field without a value")
    if text[i] in _CLOSING:
        return _block_end(text, i)
    if text[i] in "\"'":
        end = _string_end(text, i)
        while (j := _skip(text, end)) < len(text) and text[j] in "\"'":
            end = _string_end(text, j)  # "a" "b" concatenates
        return end
    match = _SCALAR.match(text, i)
    if match is None:
        raise ValueError(f"expected a value at offset {i}")
    return match.end()


def _block_end(text: str, i: int) -> int:
    stack = [_CLOSING[text[i]]]
    i += 1
    while stack:
        i = _skip(text, i)
        if i >= len(text):
            raise ValueError("unbalanced brackets")
        char = text[i]
        if char in "\"'":
            i = _string_end(text, i)
            continue
        if char in _CLOSING:
            stack.append(_CLOSING[char])
        elif char in "}>]" and char != stack.pop():
            raise ValueError("unbalanced brackets")
        i += 1
    return i


__all__ = ["Span", "replace_fields", "top_level_spans"]
