"""The engine on a Ray cluster (``workbench ray-serve``, ``serve run workbench.ray:app``;
docs/ray.md): a Ray Serve application whose replicas each host one engine from one model
repository, with the whole v2 HTTP protocol at Serve's HTTP proxy and the v2 gRPC service
(``inference.GRPCInferenceService``, its bidirectional ``ModelStreamInfer`` included) at
Serve's gRPC proxy, autoscaled on the engine's queue time per request.

Needs the ``ray`` extra (``pip install 'workbench[ray]'``); nothing else in workbench imports
this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app", "build_app"]


def __getattr__(name: str) -> Any:
    """``app`` and ``build_app`` of :mod:`workbench.ray.application`, imported (with Ray) on
    first use, so that ``workbench --help`` runs without the ray extra."""
    if name in __all__:
        from workbench.ray import application

        return getattr(application, name)
    raise AttributeError(name)
