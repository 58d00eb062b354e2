"""Argument checks of the ``pb_utils`` constructors, with Triton's exception types and texts.

Triton's ``pb_utils`` classes are C++ bound with pybind11: an argument of the wrong type
(``None`` where a ``str`` or a list is expected, an ``int`` for a ``Logger.LogLevel``)
raises ``TypeError`` from the binding ("incompatible constructor arguments" /
"incompatible function arguments"), before the call runs; a ``None`` *inside* a tensor
list gets through the binding and the C++ constructor then raises
``TritonModelException`` with its text ("Input tensor for request ... should not be
empty."). Request and response ``parameters`` must be a dict (or None) whose keys are
``str`` and values ``bool`` / ``int`` / ``str``; anything else raises
``TritonModelException`` with python_backend's texts ("Expect parameters keys to have type
str, found type <class 'int'>").

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.backends.python.pb_tensor import TritonModelException


def incompatible(function: str, argument: str, expected: str, value: Any) -> TypeError:
    """The ``TypeError`` pybind11 raises for an argument it cannot convert (its first
    sentence, then which argument and why; pybind11 lists the whole signature instead).

    Args:
        function: ``"__init__"`` for a constructor, else the method's name.
    """
    kind = "constructor" if function == "__init__" else "function"
    return TypeError(f"{function}(): incompatible {kind} arguments: '{argument}' must be "
                     f"{expected}, got {type(value).__name__} ({value!r:.80})")


def check_str(function: str, argument: str, value: Any) -> str:
    """``value`` when it is a ``str`` (pybind11 ``std::string``: ``bytes`` are decoded).

    Raises:
        TypeError: any other type (``None`` included).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise incompatible(function, argument, "str", value)


def check_int(function: str, argument: str, value: Any) -> int:
    """``value`` when it is an ``int`` (``bool`` included, as pybind11 converts it).

    Raises:
        TypeError: any other type (``None`` included).
    """
    if isinstance(value, int):
        return int(value)
    if hasattr(value, "__index__") and not isinstance(value, float):  # numpy integers
        return int(value.__index__())
    raise incompatible(function, argument, "int", value)


def check_list(function: str, argument: str, value: Any) -> list:
    """``value`` as a list when it is a sequence (not a ``str``; pybind11 ``std::vector``).

    Raises:
        TypeError: ``None``, a ``str`` or another non-sequence.
    """
    if isinstance(value, (list, tuple)):
        return list(value)
    raise incompatible(function, argument, "a list", value)


def parameters_json(parameters: Any) -> str:
    """Request / response ``parameters`` (a dict or None) as the JSON string Triton keeps.

    Raises:
        TritonModelException: not a dict ("Expect dict, got <class 'list'>"), a key that is
            not ``str``, or a value that is not ``bool`` / ``int`` / ``str`` (Triton's texts).
    """
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


__all__ = ["check_int", "check_list", "check_str", "incompatible", "parameters_json"]
