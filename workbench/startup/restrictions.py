"""Restricted API groups: tritonserver's ``--http-restricted-api`` and
``--grpc-restricted-protocol``.

Each flag value is ``<group>[,<group>...]:<key>=<value>``: a request to an API of one of
the groups is answered only when it carries the header (HTTP) or metadata entry (gRPC)
``<key>`` with exactly ``<value>``. The groups are Triton's (``restricted_features.h``);
a group may appear in one flag value only. As in Triton, the gRPC metadata key is the given
key behind the prefix ``triton-grpc-protocol-``, and the header names are compared
case-insensitively (HTTP headers and gRPC metadata keys are lower-case on the wire).

The frontends enforce it: HTTP answers 403 ``{"error": "This API is restricted, expecting
header '<key>'"}``, gRPC aborts with UNAVAILABLE ``This protocol is restricted, expecting
header 'triton-grpc-protocol-<key>'`` (Triton's texts and codes).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

#: Triton's restricted categories, in Triton's order (``RESTRICTED_CATEGORY_NAMES``)
CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging")
#: Triton's prefix of the gRPC metadata key (``kRestrictedProtocolHeaderTemplate``)
GRPC_KEY_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class Restriction:
    """The header (lower-case) and value a restricted group expects."""

    header: str
    value: str

    def allows(self, value: str | None) -> bool:
        """True when ``value`` (the request's header value, None when absent) is the key;
        compared in constant time."""
        return value is not None and hmac.compare_digest(value.encode(), self.value.encode())


def parse_restrictions(items: list[str], option: str, key_prefix: str = "",
                       feature: str = "api") -> dict[str, Restriction]:
    """``["model-repository,shared-memory:key=secret"]`` -> ``{group: Restriction}``.

    Args:
        items: the flag values, ``<group>[,<group>...]:<key>=<value>`` each.
        option: the flag's name for messages (``http-restricted-api``).
        key_prefix: put before the key (gRPC: :data:`GRPC_KEY_PREFIX`).
        feature: ``api`` (HTTP) or ``protocol`` (gRPC), in messages as Triton's.

    Raises:
        ValueError: Triton's texts: a malformed value, "unknown restricted api 'x'", or
            "restricted api 'x' can not be specified in multiple config groups".
    """
    restrictions: dict[str, Restriction] = {}
    for item in items:
        groups, colon, setting = item.partition(":")
        key, equals, value = setting.partition("=")
        if not colon or not equals or not groups.strip() or not key.strip():
            raise ValueError(f"--{option} expects <{feature}s>:<key>=<value>, got '{item}'")
        for group in (part.strip() for part in groups.split(",")):
            if group not in CATEGORIES:
                raise ValueError(f"unknown restricted {feature} '{group}' (known: "
                                 + ", ".join(CATEGORIES) + ")")
            if group in restrictions:
                raise ValueError(f"restricted {feature} '{group}' can not be specified in "
                                 "multiple config groups")
            restrictions[group] = Restriction((key_prefix + key.strip()).lower(), value)
    return restrictions


def restriction_value(groups: list[str] | tuple[str, ...], header: str, key: str) -> str:
    """The flag value restricting ``groups`` to ``header: key`` (what
    :func:`parse_restrictions` reads back)."""
    return f"{','.join(groups)}:{header}={key}"


__all__ = ["CATEGORIES", "GRPC_KEY_PREFIX", "Restriction", "parse_restrictions",
           "restriction_value"]
