"""Problems in a ``config.pbtxt`` text, each with the line it is on, for editors.

Loading raises on the first error; an editor wants every problem it can show next to
a line. :func:`parse_config_text` reports a syntax error with protobuf's own line and
column (``google.protobuf.text_format``, as Triton reads the file); semantic errors
(the messages of :mod:`workbench.config.validate` and friends, raised while loading)
are placed on a line by :func:`locate_message`, which looks for the quoted names and
config fields the message mentions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

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

    def as_dict(self) -> dict:
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
    """The 1-based line of ``text`` that a semantic error ``message`` is most likely about.

    Tries, in the order the message names them, each quoted name (a tensor, model or
    group name: the line where it is a quoted value) and then each config field name (the
    line where it is a key, ``field:`` or ``field {``). None when nothing matches.
    """
    lines = text.splitlines()
    for name in _QUOTED.findall(message):
        for number, line in enumerate(lines, 1):
            if f'"{name}"' in line or f"'{name}'" in line:
                return number
    for word in _WORD.findall(message):
        if word not in _FIELDS and "_" not in word:
            continue
        key = re.compile(rf"^\s*{re.escape(word)}\s*[:{{\[]")
        for number, line in enumerate(lines, 1):
            if key.match(line):
                return number
    return None


def semantic_problem(text: str, message: str) -> ConfigProblem:
    """A loader error ``message`` as a problem placed on its line of ``text``."""
    return ConfigProblem(message, "semantic", locate_message(text, message))


__all__ = ["ConfigProblem", "locate_message", "parse_config_text", "semantic_problem"]
