"""How a :class:`~workbench.ServerOptions` field is spelled on ``workbench serve``'s command line.

Each field carries one :class:`Flag` in its annotation (``Annotated[int, Flag(parse=port)]``);
the CLI (:mod:`workbench.hosts.cli`) builds every flag from the fields: name (tritonserver's
spelling, by default ``--`` and the field name with dashes), aliases, value parser, choices
(from a ``Literal``), repeatability (from a ``list``), help (the field's docstring) and default
(the field's). A new flag is one field. The value parsers below accept tritonserver's spellings
and raise :class:`argparse.ArgumentTypeError`, which argparse reports as ``argument --flag: ...``
with exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.common.switches import parse_switch


@dataclass(frozen=True, slots=True)
class Flag:
    """The command-line spelling of one ServerOptions field.

    Attributes:
        name: the flag (tritonserver's name); "" = ``--<field-name-with-dashes>``.
        aliases: other accepted spellings (``--model-store`` for ``--model-repository``).
        parse: one value's parser (text -> value; raises ArgumentTypeError); None = from the
            field's type (bool: :func:`switch`, int, float, str).
        metavar: the value's placeholder in ``--help``.
        required: the flag must be given.
        combine: for a repeatable flag, turns the list of values into the field's value
            (``--metrics-config KEY=VALUE ...`` -> dict); raises ValueError for a malformed one.
        via: the field has no flag of its own; it is set through this other flag (a
            tritonserver flag that fills several fields: ``--trace-config``, ``--backend-config``).
    """

    name: str = ""
    aliases: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    required: bool = False
    combine: Callable[[list[str]], Any] | None = None
    via: str = ""


def switch(text: str) -> bool:
    """A boolean flag's value: tritonserver's ``true``/``false`` and the other on/off words of
    :mod:`workbench.common.switches` (``1``/``0``, ``yes``/``no``, ``on``/``off``; any case).

    Raises:
        argparse.ArgumentTypeError: any other text (``expected true or false, got '<text>'``).
    """
    value = parse_switch(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")
    return value


def non_empty(text: str) -> str:
    """A value that may not be empty (tritonserver: "Error: empty argument for --<flag>").

    Raises:
        argparse.ArgumentTypeError: the value is empty.
    """
    if not text:
        raise argparse.ArgumentTypeError("empty argument")
    return text


def port(text: str) -> int:
    """A TCP port number, 0..65535 (0 = any free port).

    Raises:
        argparse.ArgumentTypeError: not an integer, or out of range.
    """
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port '{text}'") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {number}")
    return number


__all__ = ["Flag", "non_empty", "port", "switch"]
