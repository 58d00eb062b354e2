"""A minimal YAML writer for Kubernetes manifests, so ``workbench deploy`` needs no PyYAML.

Only what manifests use: mappings (keys kept in order), sequences, strings, numbers, booleans
and None. Every string is written double-quoted with JSON escapes, which YAML reads as the
same string ("8000" stays a string, "true" stays a string), so no value is ever reinterpreted.
"""

from __future__ import annotations

import json
import re

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def dump(document: object) -> str:
    """One YAML document for ``document`` (a dict, list or scalar), ending with a newline.

    Raises:
        TypeError: a value that is not a dict, list, tuple, str, int, float, bool or None.
    """
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents: list[object]) -> str:
    """Several documents in one stream, separated by ``---`` lines."""
    return "---\n".join(dump(document) for document in documents)


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _key(key: object) -> str:
    text = str(key)
    return text if _PLAIN_KEY.match(text) and text not in ("true", "false", "null", "yes", "no",
                                                           "on", "off", "y", "n") \
        else json.dumps(text, ensure_ascii=False)


def _lines(value: object, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        lines = []
        for key, item in value.items():
            if _is_block(item):
                lines.append(f"{pad}{_key(key)}:")
                lines.extend(_lines(item, indent + 1))
            else:
                lines.append(f"{pad}{_key(key)}: {_inline(item)}")
        return lines
    if isinstance(value, (list, tuple)):
        if not value:
            return [pad + "[]"]
        lines = []
        for item in value:
            if _is_block(item):
                nested = _lines(item, indent + 1)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines.extend(nested[1:])
            else:
                lines.append(f"{pad}- {_inline(item)}")
        return lines
    return [pad + _scalar(value)]


def _is_block(value: object) -> bool:
    return isinstance(value, (dict, list, tuple)) and bool(value)


def _inline(value: object) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return _scalar(value)


__all__ = ["dump", "dump_all"]
