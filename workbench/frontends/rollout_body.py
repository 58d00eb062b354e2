"""The fields a rollout request may carry, shared by the HTTP routes
(:mod:`workbench.frontends.http.rollout_routes`) and the gRPC ``workbench.RolloutService``
(:mod:`workbench.frontends.grpc.rollouts`): both take the same JSON object and refuse the
same typos (a product extension: Triton has no rollouts, ``docs/rollouts.md``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workbench import InvalidArgument

#: the fields of a rollout body (``server.rollouts.set``'s keyword arguments)
ROLLOUT_FIELDS = ("weights", "sticky", "candidate", "mirror_percent", "mirror_max_in_flight")
#: the field of a promote body (``server.rollouts.promote``'s version)
PROMOTE_FIELDS = ("version",)


def checked_fields(body: dict[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """``body`` unchanged when every key is one of ``known``.

    Raises:
        InvalidArgument: "unknown rollout field 'x' (known: ...)" for the first unknown key
            (in sorted order), so a typo never silently becomes a default.
    """
    allowed = tuple(known)
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidArgument(f"unknown rollout field '{unknown[0]}' (known: {', '.join(allowed) or 'none'})")
    return body


__all__ = ["PROMOTE_FIELDS", "ROLLOUT_FIELDS", "checked_fields"]
