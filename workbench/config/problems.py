"""Problems in a ``config.pbtxt`` text, each with the line it is on, for editors.

Loading raises on the first error; an editor wants every problem it can show next to
a line. :func:`parse_config_text` reports a syntax error with protobuf's own line and
column (``google.protobuf.text_format``, as Triton reads the file); semantic errors
(the messages of :mod:`workbench.config.validate` and friends, raised while loading)
are placed on a line by :func:`locate_message`: the field the message is about, found in
the text's structure (:mod:`workbench.config.pbtxt_fields`), or else the quoted names and
config fields the message mentions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config.pbtxt_fields import FieldLine, Path, child, field_lines, occurrences

_LOCATION_PREFIX = re.compile(r"^\d+:\d+ : ")
#: quoted names in a message ('INPUT0', "digits_mlp") and snake_case words (field names)
_QUOTED = re.compile(r"""['"]([^'"\s]+)['"]""")
_WORD = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]{4,})\b")
_FIELDS = frozenset(ModelConfig.DESCRIPTOR.fields_by_name)


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem of a model config text.

    Attributes:
        message: what is wrong, in the loader's words (Triton's texts where Triton has one).
        kind: ``"syntax"`` (the text does not parse) or ``"semantic"`` (it parses, but would
            not load).
        line: 1-based line the problem is on, or None when no line can be named (e.g. a
            required field that is missing).
        column: 1-based column for syntax errors, else None.
    """

    message: str
    kind: str = "semantic"
    line: int | None = None
    column: int | None = None

    def as_dict(self) -> dict[str, str | int | None]:
        """``{"message", "kind", "line", "column"}`` (line/column may be None): JSON-ready."""
        return {"message": self.message, "kind": self.kind, "line": self.line,
                "column": self.column}

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def parse_config_text(text: str) -> tuple[ModelConfig | None, list[ConfigProblem]]:
    """Parse ``config.pbtxt`` text as Triton does; a syntax error becomes a problem.

    Returns:
        ``(config, [])`` when the text parses, ``(None, [syntax problem])`` otherwise; the
        problem carries protobuf's line and column (1-based).
    """
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        message = _LOCATION_PREFIX.sub("", str(exc))
        return None, [ConfigProblem(message, "syntax", exc.GetLine(), exc.GetColumn())]
    return config, []


def locate_message(text: str, message: str) -> int | None:
    """The 1-based line of ``text`` that a semantic error ``message`` is about: the field it
    names, where the text's structure (:mod:`workbench.config.pbtxt_fields`) says which.

    * An input / output (``model input 'X' ...``, ``ensemble output 'X' ...``): the line of
      the field the message names in X's entry (``dims``, ``data_type``, ``reshape``, ...),
      else of X's ``name``; for "specified more than once", the second entry's ``name``.
    * An instance group (``instance group G of model ...``): its ``count`` / ``kind`` /
      ``gpus`` / ``profile`` line as the message names it, else the group's line.
    * A dotted field path (``'version_policy.latest.num_versions'``): that field.
    * Otherwise, in the order the message names them, each quoted name (the line where it is
      a quoted value: the second such line for a name "specified more than once" / "only
      once") and then each config field name (the line where it is a key). None when
      nothing matches.
    """
    fields = field_lines(text)
    for locate in (_locate_io, _locate_group, _locate_path):
        line = locate(fields, message)
        if line is not None:
            return line
    return _locate_words(text, message)


#: ``model input 'X' ...`` / ``ensemble output 'X' ...``
_IO = re.compile(r"\b(?:model|ensemble) (input|output) '([^']+)' (.*)")
_IO_NO_NAME = re.compile(r"\bmodel (input|output) must specify 'name'")
#: words of an input / output message -> the field of the entry they are about
_IO_FIELDS = (("data_type", "data_type"), ("reshape", "reshape"), ("dims", "dims"),
              ("dimension", "dims"), ("shape tensor", "is_shape_tensor"), ("IO format", "format"),
              ("format", "format"), ("NHWC/NCHW", "format"), ("optional", "optional"))
_GROUP = re.compile(r"\binstance group (\S+) of model (\S+)")
_GROUP_FIELDS = (("'count'", "count"), ("kind", "kind"), ("GPU", "gpus"), ("gpu", "gpus"),
                 ("profile", "profile"))
_DOTTED = re.compile(r"'([a-z_]+(?:\.[a-z_]+)+)'")
_TWICE = re.compile(r"more than once|only (?:be specified |appear in an output map )?once|only once")


def _named(fields: list[FieldLine], kind: str, name: str) -> list[tuple[FieldLine, FieldLine]]:
    """The top-level ``kind`` entries (input / output) named ``name``: (entry, its name)."""
    found = []
    for entry in occurrences(fields, (), kind):
        own = child(fields, entry.path, "name")
        if own is not None and own.value == name:
            found.append((entry, own))
    return found


def _locate_io(fields: list[FieldLine], message: str) -> int | None:
    unnamed = _IO_NO_NAME.search(message)
    if unnamed:
        for entry in occurrences(fields, (), unnamed.group(1)):
            if child(fields, entry.path, "name") is None:
                return entry.line
        return None
    match = _IO.search(message)
    if match is None:
        return None
    kind, name, rest = match.groups()
    entries = _named(fields, kind, name)
    if not entries:
        return None
    if _TWICE.search(rest):
        return entries[min(1, len(entries) - 1)][1].line
    entry, own = entries[0]
    return _field_named_in(fields, entry.path, rest, _IO_FIELDS, own.line)


def _locate_group(fields: list[FieldLine], message: str) -> int | None:
    match = _GROUP.search(message)
    if match is None:
        return None
    group_name, model = match.groups()
    groups = occurrences(fields, (), "instance_group")
    group = next((g for g in groups if (child(fields, g.path, "name") or g).value == group_name), None)
    if group is None:  # unnamed: the loader names them <model>_<index>
        index = group_name[len(model) + 1:] if group_name.startswith(f"{model}_") else ""
        group = groups[int(index)] if index.isdigit() and int(index) < len(groups) else None
    if group is None:
        return groups[0].line if len(groups) == 1 else None
    return _field_named_in(fields, group.path, message[match.end():], _GROUP_FIELDS, group.line)


def _field_named_in(fields: list[FieldLine], path: Path, rest: str,
                    table: tuple[tuple[str, str], ...], default: int) -> int:
    """The line of the first field of ``table`` (message word -> field) that ``rest`` names
    and the entry at ``path`` has; else ``default`` (the entry's own line)."""
    for word, field in table:
        if word in rest:
            found = child(fields, path, field)
            if found is not None:
                return found.line
    return default


def _locate_path(fields: list[FieldLine], message: str) -> int | None:
    for dotted in _DOTTED.findall(message):
        parent: Path = ()
        found = None
        for name in dotted.split("."):
            step = child(fields, parent, name)
            if step is None:
                break
            found, parent = step, step.path
        if found is not None:
            return found.line
    return None


def _locate_words(text: str, message: str) -> int | None:
    lines = text.splitlines()
    twice = _TWICE.search(message) is not None
    for name in _QUOTED.findall(message):
        at = [number for number, line in enumerate(lines, 1) if f'"{name}"' in line or f"'{name}'" in line]
        if at:
            return at[min(1, len(at) - 1)] if twice else at[0]
    for word in _WORD.findall(message):
        if word not in _FIELDS and "_" not in word:
            continue
        key = re.compile(rf"^\s*{re.escape(word)}\s*[:{{\[<]")
        for number, line in enumerate(lines, 1):
            if key.match(line):
                return number
    return None


def semantic_problem(text: str, message: str) -> ConfigProblem:
    """A loader error ``message`` as a problem placed on its line of ``text``."""
    return ConfigProblem(message, "semantic", locate_message(text, message))


__all__ = ["ConfigProblem", "locate_message", "parse_config_text", "semantic_problem"]
