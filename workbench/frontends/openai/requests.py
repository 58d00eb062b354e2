"""Reading an OpenAI request body: a JSON object, its members checked with OpenAI's names."""

from __future__ import annotations

from typing import Any

import orjson

from workbench.frontends.openai.errors import OpenAIError


def parse_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object.

    Raises:
        OpenAIError: 400 "We could not parse the JSON body of your request." (OpenAI's text)
            for a body that is not JSON, or not an object.
    """
    try:
        members = orjson.loads(body)
    except orjson.JSONDecodeError:
        members = None
    if not isinstance(members, dict):
        raise OpenAIError("We could not parse the JSON body of your request. (HINT: This likely "
                          "means you aren't using your HTTP library correctly. The OpenAI API "
                          "expects a JSON payload, but what was sent was not valid JSON.)")
    return members


def required_string(members: dict[str, Any], name: str) -> str:
    """``members[name]`` as a non-empty string.

    Raises:
        OpenAIError: 400 "'<name>' is a required property" / "'<name>' must be a string".
    """
    value = members.get(name)
    if value is None:
        raise OpenAIError(f"'{name}' is a required property", param=name)
    if not isinstance(value, str) or not value:
        raise OpenAIError(f"'{name}' must be a non-empty string", param=name)
    return value


def optional(members: dict[str, Any], name: str, kind: type | tuple[type, ...],
             default: Any = None) -> Any:
    """``members[name]`` of type ``kind`` (``default`` when absent or null); a bool is never
    taken for an int.

    Raises:
        OpenAIError: 400 "'<name>' must be <kind>".
    """
    value = members.get(name)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__.replace("str", "a string").replace("int", "an integer")
                            .replace("float", "a number").replace("bool", "a boolean")
                            .replace("dict", "an object").replace("list", "an array")
                            for k in kinds)
        raise OpenAIError(f"'{name}' must be {names}", param=name)
    return value


__all__ = ["optional", "parse_body", "required_string"]
