"""Which line of a ``config.pbtxt`` text each field (at any depth) is on, for placing an
error on the field it is about.

``google.protobuf.text_format`` (Python) parses without keeping positions. :func:`field_lines`
walks the text with the lexical rules of the text format (``#`` comments, quoted strings,
``{}`` / ``<>`` message values, ``[...]`` lists of values or messages, ``,`` / ``;``
separators) and lists every field occurrence with its path and line.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from dataclasses import dataclass

#: one token: a string, a bracket or separator, or a name / scalar
_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
    r"""|([{}<>\[\]:,;])|([^\s{}<>\[\]:,;#"']+)"""
)
_CLOSING = {"{": "}", "<": ">"}

#: a field's place: ``((field, occurrence), ...)`` from the top, e.g. ``(("output", 1), ("name", 0))``
Path = tuple[tuple[str, int], ...]
#: one lexed token: ``(text, line, is_string)``
Token = tuple[str, int, bool]


@dataclass(frozen=True, slots=True)
class FieldLine:
    """One field occurrence: its path, the 1-based line of its name (of the element, for a
    list's elements), and its value (a scalar's text, strings unquoted; None for a message)."""

    path: Path
    line: int
    value: str | None


def field_lines(text: str) -> list[FieldLine]:
    """Every field occurrence of ``text`` in order (a message before its fields). A text that
    does not lex as the text format gives the occurrences before the fault."""
    tokens = _tokens(text)
    fields: list[FieldLine] = []
    with contextlib.suppress(IndexError):  # ran off the end: a text that does not parse
        _message(tokens, 0, (), fields, None)
    return fields


def occurrences(fields: list[FieldLine], parent: Path, name: str) -> list[FieldLine]:
    """The occurrences of field ``name`` directly in the message at ``parent``."""
    depth = len(parent) + 1
    return [f for f in fields if len(f.path) == depth and f.path[:-1] == parent and f.path[-1][0] == name]


def child(fields: list[FieldLine], parent: Path, name: str) -> FieldLine | None:
    """The first occurrence of ``name`` in the message at ``parent``, or None."""
    found = occurrences(fields, parent, name)
    return found[0] if found else None


def _tokens(text: str) -> list[Token]:
    """``(text, line, is_string)`` of each token (strings unquoted, not unescaped)."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    tokens: list[Token] = []
    for match in _TOKEN.finditer(text):
        string, punct, word = match.groups()
        if string is None and punct is None and word is None:
            continue
        line = bisect.bisect_right(starts, match.start())
        if string is not None:
            tokens.append((string[1:-1], line, True))
        else:
            tokens.append((punct or word, line, False))
    return tokens


def _message(tokens: list[Token], i: int, path: Path, out: list[FieldLine], closing: str | None) -> int:
    counts: dict[str, int] = {}
    while i < len(tokens):
        name, line, is_string = tokens[i]
        if not is_string and name == closing:
            return i + 1
        if name == "[" and not is_string:  # an extension / Any name: [type.googleapis.com/x]
            j = i + 1
            while tokens[j][0] != "]":
                j += 1
            name = "".join(t[0] for t in tokens[i:j + 1])
            i = j
        i += 1
        if tokens[i][0] == ":" and not tokens[i][2]:
            i += 1
        value, _, value_is_string = tokens[i]
        if not value_is_string and value == "[":
            i += 1
            while not (tokens[i][0] == "]" and not tokens[i][2]):
                if tokens[i][0] == "," and not tokens[i][2]:
                    i += 1
                    continue
                i = _value(tokens, i, path, name, counts, out, tokens[i][1])
        else:
            i = _value(tokens, i, path, name, counts, out, line)
            i -= 1
        i += 1
        if i < len(tokens) and tokens[i][0] in ",;" and not tokens[i][2]:
            i += 1
    return i


def _value(tokens: list[Token], i: int, path: Path, name: str, counts: dict[str, int], out: list[FieldLine],
           line: int) -> int:
    """One value of ``name`` at ``tokens[i]``: recorded, its index past it returned."""
    index = counts.get(name, 0)
    counts[name] = index + 1
    here = (*path, (name, index))
    text, _, is_string = tokens[i]
    if not is_string and text in _CLOSING:
        out.append(FieldLine(here, line, None))
        return _message(tokens, i + 1, here, out, _CLOSING[text])
    value = text
    i += 1
    while is_string and i < len(tokens) and tokens[i][2]:  # "a" "b" concatenates
        value += tokens[i][0]
        i += 1
    out.append(FieldLine(here, line, value))
    return i


__all__ = ["FieldLine", "Path", "child", "field_lines", "occurrences"]
