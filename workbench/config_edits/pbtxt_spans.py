"""Where each top-level field of a ``config.pbtxt`` text is, so one field can be rewritten
while every other line (comments, layout) stays as the user wrote it.

``google.protobuf.text_format`` parses and prints whole messages and drops comments; the
config editor's form controls and Tuning's Apply best change a few fields, and the diff
against the file should show only those values. :func:`top_level_spans` walks the text with
the lexical rules of the text format (``#`` comments, quoted strings, ``{}`` / ``<>`` /
``[]`` nesting) and returns the span of each top-level ``field: value`` /
``field { ... }``; :func:`field_spans` does the same
inside one message's brackets, and :func:`list_items` inside a ``[...]`` list, so
:mod:`workbench.config_edits.pbtxt_edit` can change one value deep inside a block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\[[A-Za-z0-9_./]+\]")
_SCALAR = re.compile(r"[^\s,;{}\[\]<>#:\"']+")
_CLOSING = {"{": "}", "<": ">", "[": "]"}


@dataclass(frozen=True, slots=True)
class Span:
    """One field occurrence: ``text[start:end]`` is ``name ...value`` (with a trailing ``,``
    / ``;`` separator when there is one); ``text[value_start:value_end]`` is its value (a
    scalar token, strings, or a whole ``{...}`` / ``<...>`` / ``[...]``)."""

    name: str
    start: int
    end: int
    value_start: int
    value_end: int

    def is_block(self, text: str) -> bool:
        """Its value is a message (``{...}`` or ``<...>``)."""
        return text[self.value_start] in "{<"

    def is_list(self, text: str) -> bool:
        """Its value is a ``[...]`` list."""
        return text[self.value_start] == "["


def top_level_spans(text: str) -> list[Span]:
    """The top-level fields of ``text`` in order (a repeated field once per occurrence).

    Raises:
        ValueError: ``text`` is not lexically a text-format message (unbalanced brackets, an
            unterminated string, a value missing); parse it with ``text_format`` first.
    """
    return field_spans(text, 0, len(text))


def field_spans(text: str, start: int, end: int) -> list[Span]:
    """The fields written in ``text[start:end]`` (the whole text, or the inside of a
    message's brackets, :func:`inside`) in order.

    Raises:
        ValueError: as :func:`top_level_spans`.
    """
    spans = []
    i = _skip(text, start, end)
    while i < end:
        match = _NAME.match(text, i, end)
        if match is None:
            raise ValueError(f"expected a field name at offset {i}")
        j = _skip(text, match.end(), end)
        if j < end and text[j] == ":":
            j = _skip(text, j + 1, end)
        value_end = _value_end(text, j, end)
        span_end = value_end
        k = _skip(text, value_end, end)
        if k < end and text[k] in ",;":
            span_end = k + 1
        spans.append(Span(match.group(), i, span_end, j, value_end))
        i = _skip(text, span_end, end)
    return spans


def inside(span: Span) -> tuple[int, int]:
    """Where the inside of a bracketed value is: between its opening and closing bracket."""
    return span.value_start + 1, span.value_end - 1


def list_items(text: str, span: Span) -> list[tuple[int, int]]:
    """The ``(start, end)`` of each item of a ``[...]`` value (without the commas).

    Raises:
        ValueError: the value is not a list, or an item is not lexically a value.
    """
    if not span.is_list(text):
        raise ValueError(f"'{span.name}' is not written as a list")
    start, end = inside(span)
    items = []
    i = _skip(text, start, end)
    while i < end:
        item_end = _value_end(text, i, end)
        items.append((i, item_end))
        i = _skip(text, item_end, end)
        if i < end and text[i] == ",":
            i = _skip(text, i + 1, end)
    return items


def whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen ``[start, end)`` to whole lines (with the newline) when nothing but blanks
    shares them; otherwise return it as it is."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    before, after = text[line_start:start], text[end:line_end]
    if before.strip() or after.strip():  # e.g. a comment after the value stays, on its line
        return start, end
    return line_start, line_end


def line_indent(text: str, position: int) -> str:
    """The blanks that start the line holding ``position``."""
    line_start = text.rfind("\n", 0, position) + 1
    line = text[line_start:position]
    return line[:len(line) - len(line.lstrip(" \t"))]


def starts_line(text: str, position: int) -> bool:
    """Only blanks stand before ``position`` on its line."""
    return not text[text.rfind("\n", 0, position) + 1:position].strip()


def _skip(text: str, i: int, end: int | None = None) -> int:
    """Past blanks and ``#`` comments (up to ``end``)."""
    end = len(text) if end is None else end
    while i < end:
        if text[i].isspace():
            i += 1
        elif text[i] == "#":
            newline = text.find("\n", i, end)
            i = end if newline < 0 else newline + 1
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


def _value_end(text: str, i: int, end: int) -> int:
    """The end of the value starting at ``i`` (before ``end``): a bracketed block, adjacent
    strings, or one scalar token (number, enum name, identifier)."""
    if i >= end:
        raise ValueError("a field without a value")
    if text[i] in _CLOSING:
        stop = _block_end(text, i)
    elif text[i] in "\"'":
        stop = _string_end(text, i)
        while (j := _skip(text, stop, end)) < end and text[j] in "\"'":
            stop = _string_end(text, j)  # "a" "b" concatenates
    else:
        match = _SCALAR.match(text, i, end)
        if match is None:
            raise ValueError(f"expected a value at offset {i}")
        stop = match.end()
    if stop > end:
        raise ValueError("unbalanced brackets")
    return stop


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


__all__ = ["Span", "field_spans", "inside", "line_indent", "list_items", "starts_line",
           "top_level_spans", "whole_lines"]
