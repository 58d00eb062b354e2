"""Rewrite a ``config.pbtxt`` text so that it holds a changed message, touching only the
values that changed: comments, field order, indent and list style stay, inside rewritten
blocks too (``text_format`` would print the whole message its own way).

:func:`rewrite_message` compares the message parsed from the text with the changed one field
by field and edits the text in place (:mod:`workbench.config_edits.pbtxt_spans` finds where
each field is written):

* a changed scalar: its value token replaced (a comment after it stays);
* a changed list of scalars: written again in the style found (``[ 4, 8 ]`` with the same
  spacing and separator, or repeated ``preferred_batch_size: 4`` lines);
* a changed message, or the elements of a repeated message whose number is unchanged: its
  block rewritten the same way, recursively;
* a changed map (``parameters``) written entry by entry: a changed entry's value rewritten in
  its block, a removed key's entry removed, a new key on a line after the last entry (as
  Triton writes one); the other entries and comments stay byte for byte;
* a field added: at the end of its block, indented as its siblings (an empty ``{ }`` opens onto
  lines, one unit deeper; the unit is the file's own);
* a field removed: its text removed, with its line where it stood alone.

Anything the lexer cannot place (a repeated message whose element count changed, a map
written as a ``[...]`` list whose keys changed) is written whole at its first occurrence.
Users' view: docs/dashboard.md (**Config**)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from workbench.config_edits.pbtxt_spans import (
    Span,
    field_spans,
    inside,
    line_indent,
    list_items,
    starts_line,
    whole_lines,
)

#: a list of scalars as written in a file: ``[``, its padding, items, ``]``
_SCALAR_LIST = re.compile(r"\[( *)[^\[\]{}<>\n]*?[\w\"'.]( *)\]")


@dataclass(frozen=True)
class _Style:
    """How the file writes what is added: the indent unit and the scalar-list spacing."""

    unit: str = "  "
    pad: str = " "
    separator: str = ", "

    def values(self, items: list[str]) -> str:
        return f"[{self.pad}{self.separator.join(items)}{self.pad}]" if items else "[ ]"


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


def rewrite_message(text: str, before: Message, after: Message) -> str:
    """``text`` (which parses as ``before``) edited to hold ``after``, only the fields that
    differ rewritten (see the module docstring).

    Raises:
        ValueError: ``text`` is not lexically a text-format message.
    """
    edits: list[_Edit] = []
    _Rewriter(text, _style_of(text), edits).block(0, len(text), before, after, top=True)
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:edit.start] + edit.text + text[edit.end:]
    return text


def _style_of(text: str) -> _Style:
    """The indent unit (the smallest indent of an indented line; 2 spaces when none) and the
    scalar-list spacing of the first list written in ``text``."""
    indents = [len(line) - len(line.lstrip(" ")) for line in text.splitlines()
               if line.strip() and line.startswith(" ")]
    unit = " " * min(indents) if indents else "  "
    match = _SCALAR_LIST.search(text)
    if match is None:
        return _Style(unit)
    return _Style(unit, match.group(1), _separator(match.group(), _Style.separator))


class _Rewriter:
    def __init__(self, text: str, style: _Style, edits: list[_Edit]) -> None:
        self.text, self.style, self.edits = text, style, edits

    def block(self, start: int, end: int, before: Message, after: Message, *, top: bool = False) -> None:
        """Edit the fields written in ``text[start:end]`` (a whole text when ``top``, else
        the inside of a message's brackets) from ``before`` to ``after``."""
        spans = field_spans(self.text, start, end)
        added: list[FieldDescriptor] = []
        for field in after.DESCRIPTOR.fields:
            if _value_of(before, field) == _value_of(after, field):
                continue
            written = [s for s in spans if s.name == field.name]
            if not written:
                added.append(field)
            elif field.label == FieldDescriptor.LABEL_REPEATED:
                self.repeated(written, field, before, after)
            elif field.message_type is not None:
                self.message(written, field, before, after)
            else:
                self.replace(written[0].value_start, written[0].value_end, _scalar(after, field))
        if added:
            self.insert(start, end, spans, after, added, top)

    # ----------------------------------------------------------------- changed fields
    def message(self, written: list[Span], field: FieldDescriptor, before: Message,
                after: Message) -> None:
        if not after.HasField(field.name):
            self.remove(written)
        elif len(written) == 1 and written[0].is_block(self.text):
            self.block(*inside(written[0]), getattr(before, field.name), getattr(after, field.name))
        else:
            self.rewrite_whole(written, field, after)

    def repeated(self, written: list[Span], field: FieldDescriptor, before: Message,
                 after: Message) -> None:
        if not getattr(after, field.name):
            self.remove(written)
        elif field.message_type is None:
            self.scalars(written, field, after)
        elif _is_map(field):
            if not self.entries(written, field, before, after):
                self.rewrite_whole(written, field, after)
        elif not self.elements(written, list(getattr(before, field.name)),
                               list(getattr(after, field.name))):
            self.rewrite_whole(written, field, after)

    def scalars(self, written: list[Span], field: FieldDescriptor, after: Message) -> None:
        """A repeated scalar, written again in the style of its first occurrence."""
        first = written[0]
        items = [_scalar(after, field, index) for index in range(len(getattr(after, field.name)))]
        if first.is_list(self.text):
            self.replace(first.value_start, first.value_end, _list_like(self.text, first, items, self.style))
        else:
            gap = "\n" + line_indent(self.text, first.start) if starts_line(self.text, first.start) else " "
            self.replace(first.start, first.end, gap.join(f"{field.name}: {item}" for item in items))
        self.remove(written[1:])

    def elements(self, written: list[Span], before: list[Message], after: list[Message]) -> bool:
        """Rewrite each changed element of a repeated message in place; False (nothing
        done) when the written elements are not ``before``'s, one for one."""
        places: list[tuple[int, int]] = []
        for span in written:
            if span.is_block(self.text):
                places.append(inside(span))
            elif span.is_list(self.text):
                for item_start, item_end in list_items(self.text, span):
                    if self.text[item_start] not in "{<":
                        return False
                    places.append((item_start + 1, item_end - 1))
            else:
                return False
        if not len(places) == len(before) == len(after):
            return False
        for (start, end), old, new in zip(places, before, after, strict=True):
            if old != new:
                self.block(start, end, old, new)
        return True

    def entries(self, written: list[Span], field: FieldDescriptor, before: Message,
                after: Message) -> bool:
        """Edit a map entry by entry (see the module docstring); False (nothing done) when
        an entry is not written as a block of its own or a key is written twice."""
        entry_type = GetMessageClass(field.message_type)
        keys = []
        for span in written:
            if not span.is_block(self.text):
                return False
            entry = entry_type()
            try:
                text_format.Parse(self.text[slice(*inside(span))], entry)
            except text_format.ParseError:
                return False
            keys.append(entry.key)
        if len(set(keys)) != len(keys):
            return False
        old, new = getattr(before, field.name), getattr(after, field.name)
        for span, key in zip(written, keys, strict=True):
            if key not in new:
                self.remove([span])
            elif new[key] != old[key]:
                self.block(*inside(span), _entry(entry_type, key, old), _entry(entry_type, key, new))
        added = [_entry_line(field.name, _entry(entry_type, key, new)) for key in sorted(new) if key not in old]
        if added:
            self.after_entry(written[-1], added)
        return True

    def after_entry(self, last: Span, lines: list[str]) -> None:
        """Write ``lines`` after the entry ``last``: each on a line of its own, indented as
        it, where it has its line (a comment after it may share it); else on its line."""
        text = self.text
        eol = text.find("\n", last.end)
        rest = text[last.end:len(text) if eol < 0 else eol].strip()
        if not starts_line(text, last.start) or (rest and not rest.startswith("#")):
            self.edits.append(_Edit(last.end, last.end, " " + " ".join(lines)))
            return
        indent = line_indent(text, last.start)
        at, gap = (len(text), "\n") if eol < 0 else (eol + 1, "")
        self.edits.append(_Edit(at, at, gap + "".join(f"{indent}{line}\n" for line in lines)))

    def rewrite_whole(self, written: list[Span], field: FieldDescriptor, after: Message) -> None:
        """The field printed whole where it first stood; its other occurrences removed."""
        first = written[0]
        indent = line_indent(self.text, first.start)
        lines = _field_lines(after, field, indent, self.style)
        self.replace(first.start, first.end, "\n".join(lines)[len(indent):])
        self.remove(written[1:])

    # ----------------------------------------------------------------- added fields
    def insert(self, start: int, end: int, spans: list[Span], after: Message,
               fields: list[FieldDescriptor], top: bool) -> None:
        """Write ``fields`` at the end of the block ``text[start:end]``."""
        text = self.text
        if top:
            indent = ""
        elif spans and starts_line(text, spans[0].start):
            indent = line_indent(text, spans[0].start)
        else:
            indent = line_indent(text, start) + self.style.unit
        lines = [line for field in fields for line in _field_lines(after, field, indent, self.style)]
        if top:
            gap = "" if not text or text.endswith("\n") else "\n"
            self.edits.append(_Edit(end, end, gap + "\n".join(lines) + "\n"))
        elif "\n" in text[start:end] and starts_line(text, end):  # the closing bracket's own line
            at = text.rfind("\n", 0, end) + 1
            self.edits.append(_Edit(at, at, "\n".join(lines) + "\n"))
        elif not text[start:end].strip():  # `{ }`: opens onto lines
            self.edits.append(_Edit(start, end, "\n" + "\n".join(lines) + "\n" + line_indent(text, start)))
        else:  # a one-line block keeps to its line
            last = start + len(text[start:end].rstrip())
            one_line = " ".join(line.strip() for line in lines)
            self.edits.append(_Edit(last, last, " " + one_line))

    # ----------------------------------------------------------------- text edits
    def replace(self, start: int, end: int, new: str) -> None:
        self.edits.append(_Edit(start, end, new))

    def remove(self, spans: list[Span]) -> None:
        for span in spans:
            start, end = whole_lines(self.text, span.start, span.end)
            if (start, end) == (span.start, span.end) and start > 0 and self.text[start - 1] == " ":
                start -= 1  # `{ a: 1 b: 2 }` -> `{ a: 1 }`
            self.edits.append(_Edit(start, end, ""))


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _value_of(message: Message, field: FieldDescriptor) -> bytes:
    """One field of ``message`` alone, serialized (deterministically: maps in key order):
    equal for equal values, presence of an empty message included."""
    only = type(message)()
    if field.label == FieldDescriptor.LABEL_REPEATED:
        getattr(only, field.name).MergeFrom(getattr(message, field.name))
    elif field.message_type is not None:
        if message.HasField(field.name):
            getattr(only, field.name).SetInParent()
            getattr(only, field.name).CopyFrom(getattr(message, field.name))
    else:
        setattr(only, field.name, getattr(message, field.name))
    present = b"1" if field.message_type is not None and field.label != FieldDescriptor.LABEL_REPEATED \
        and message.HasField(field.name) else b"0"
    return present + only.SerializeToString(deterministic=True)


def _scalar(message: Message, field: FieldDescriptor, index: int | None = None) -> str:
    """A scalar value of ``message`` (element ``index`` of a repeated one) as the text format
    writes it (enum names, quoted and escaped strings, shortest floats)."""
    only = type(message)()
    value = getattr(message, field.name)
    if index is None:
        setattr(only, field.name, value)
    else:
        getattr(only, field.name).append(value[index])
    printed = text_format.MessageToString(only, as_one_line=True)
    prefix = f"{field.name}: "
    if not printed.startswith(prefix):  # a default value: the text format prints nothing
        return _default_text(field)
    return printed[len(prefix):]


def _default_text(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[0].name
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "false"
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return '""'
    return "0"


def _list_like(text: str, span: Span, items: list[str], style: _Style) -> str:
    """``items`` as a list written as the list at ``span`` is (its padding and separator)."""
    written = text[span.value_start:span.value_end]
    match = _SCALAR_LIST.fullmatch(written)
    if match is None:  # `[ ]` or a list over lines: the file's style
        return style.values(items)
    return _Style(style.unit, match.group(1), _separator(written, style.separator)).values(items)


def _separator(listed: str, default: str) -> str:
    """The separator of the scalar list ``listed`` (``[ 4, 8 ]`` -> ``", "``); ``default``
    when it has one item (``[ 8 ]`` says nothing of how the file separates items)."""
    if "," not in listed:
        return default
    return ", " if ", " in listed else ","


def _field_lines(message: Message, field: FieldDescriptor, indent: str, style: _Style) -> list[str]:
    """``field`` of ``message`` printed as lines at ``indent`` in the file's style."""
    name = field.name
    if field.message_type is None:
        if field.label != FieldDescriptor.LABEL_REPEATED:
            return [f"{indent}{name}: {_scalar(message, field)}"]
        items = [_scalar(message, field, i) for i in range(len(getattr(message, name)))]
        return [f"{indent}{name}: {style.values(items)}"] if items else []
    if _is_map(field):  # one line per entry, in key order, as Triton's docs write them
        entry_type, entries = GetMessageClass(field.message_type), getattr(message, name)
        return [indent + _entry_line(name, _entry(entry_type, key, entries)) for key in sorted(entries)]
    if field.label == FieldDescriptor.LABEL_REPEATED:
        return [line for entry in getattr(message, name)
                for line in _message_lines(name, entry, indent, style)]
    if not message.HasField(name):
        return []
    return _message_lines(name, getattr(message, name), indent, style)


def _entry(entry_type: type[Message], key: Any, entries: Any) -> Message:
    """The entry ``key`` of the map ``entries`` as a message of the map's entry type."""
    entry = entry_type()
    entry.key = key
    value = entries[key]
    if isinstance(value, Message):
        entry.value.CopyFrom(value)
    else:
        entry.value = value
    return entry


def _entry_line(name: str, entry: Message) -> str:
    """A map entry on one line: ``parameters { key: "k" value: { string_value: "2" } }``."""
    fields = entry.DESCRIPTOR.fields_by_name
    value = fields["value"]
    if value.message_type is None:
        shown = _scalar(entry, value)
    else:
        inner = text_format.MessageToString(entry.value, as_one_line=True)
        shown = f"{{ {inner} }}" if inner else "{ }"
    return f"{name} {{ key: {_scalar(entry, fields['key'])} value: {shown} }}"


def _message_lines(name: str, message: Message, indent: str, style: _Style) -> list[str]:
    inner = [line for field, _ in message.ListFields()
             for line in _field_lines(message, field, indent + style.unit, style)]
    if not inner:
        return [f"{indent}{name} {{ }}"]
    return [f"{indent}{name} {{", *inner, f"{indent}}}"]


__all__ = ["rewrite_message"]
