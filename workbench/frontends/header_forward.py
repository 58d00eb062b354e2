"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers (gRPC
metadata) whose name matches the pattern become string request parameters, as tritonserver.

Triton's rules (``http_server.cc`` ForEachHeader, ``grpc/infer_handler.h``
ForwardHeadersAsParameters, ``command_line_parser.cc``):

- the pattern is case-insensitive (Triton prefixes ``(?i)``); a pattern starting with
  ``(?-i)`` turns that off, so ``(?-i)MY_HEADER.*`` matches no lower-case gRPC key;
- it needs to match only part of the name (RE2 ``PartialMatch``: :func:`re.search`);
- a matching header named like a reserved parameter (``sequence_id``, ``sequence_start``,
  ``sequence_end``, ``priority``, ``timeout``, ``headers``, ``binary_data_output``) or
  starting with ``triton_`` fails the request: INVALID_ARG "Header '<name>' is reserved for
  Triton usage and cannot be forwarded.";
- no pattern: nothing is forwarded.

Header names arrive lower-case here (ASGI and HTTP/2 lower-case them), so forwarded keys are
lower-case; Triton's HTTP server (libevhtp) keeps the client's spelling.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workbench import InvalidArgument

#: Triton's reserved parameter keys (``src/common.h`` kReservedParameterKeys)
RESERVED_PARAMETER_KEYS = frozenset({
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers",
    "binary_data_output",
})
_CASE_SENSITIVE = "(?-i)"


def compile_forward_pattern(pattern: str) -> re.Pattern[str] | None:
    """The compiled header-forward pattern, or None for ``""`` (forward nothing).

    Raises:
        re.error: not a valid regular expression.
    """
    if not pattern:
        return None
    if pattern.startswith(_CASE_SENSITIVE):
        return re.compile(pattern[len(_CASE_SENSITIVE):])
    return re.compile(pattern, re.IGNORECASE)


def forwarded_parameters(
    pattern: re.Pattern[str] | None, headers: Iterable[tuple[Any, Any]]
) -> dict[str, str]:
    """``{name: value}`` of the ``(name, value)`` headers whose name ``pattern`` matches
    (names and values as ``str`` or ``bytes``, decoded as Latin-1 like HTTP headers).

    Raises:
        InvalidArgument: a matching header has a reserved name (Triton's text).
    """
    if pattern is None:
        return {}
    forwarded: dict[str, str] = {}
    for key, value in headers:
        name = key.decode("latin-1") if isinstance(key, bytes) else key
        if pattern.search(name) is None:
            continue
        if name in RESERVED_PARAMETER_KEYS or name.startswith("triton_"):
            raise InvalidArgument(f"Header '{name}' is reserved for Triton usage and cannot be forwarded.")
        forwarded[name] = value.decode("latin-1") if isinstance(value, bytes) else value
    return forwarded


__all__ = ["RESERVED_PARAMETER_KEYS", "compile_forward_pattern", "forwarded_parameters"]
