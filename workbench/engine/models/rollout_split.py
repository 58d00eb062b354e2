"""The weighted split of a rollout: which READY version of a model an unversioned request
runs on (:mod:`workbench.engine.rollout.rollouts`; a product extension, Triton has none).

:meth:`Split.choose` is called by
:meth:`~workbench.engine.models.lifecycle.ModelLifecycle.resolve_request` for each request without a
version (``""`` / ``"-1"``) of a model with a split, so a split set, replaced or cleared
applies to the next request resolved and none in flight is dropped. Versions of the split
that are not READY now (loading, unloaded by a reload) get no traffic: their weight goes to
the others in proportion; when none is READY the request goes where it would without a
split (the latest READY version).

Sticky: with ``sticky`` naming a request parameter (an HTTP header reaches the parameters
through tritonserver's ``--http-header-forward-pattern``), a request carrying it goes to the
version its value hashes to (blake2b of the value into the cumulative weights): the same
value always lands on the same version while the split and its READY versions stay the same.
A request of a sequence (``sequence_id`` set) is always sticky on its sequence id, so every
request of a sequence runs on one version.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from workbench.engine.inference.model import LoadedModel
from workbench.engine.models.registry import ModelEntry
from workbench.messages.types import InferenceRequest, ModelReadyState

_SCALE = float(2**64)


@dataclass
class Split:
    """Weights per version (non-negative numbers; only their ratios count) and the request
    parameter whose value makes the choice sticky ("" = random per request).

    ``routed`` counts the requests the split sent to each version since it was set (the
    per-version inference counts of Triton's statistics and metrics count every request a
    version ran, mirrored and version-named ones included)."""

    weights: dict[int, float]
    sticky: str = ""
    routed: dict[int, int] = field(default_factory=dict)

    def choose(self, entry: ModelEntry, request: InferenceRequest) -> LoadedModel | None:
        """The READY version of ``entry`` the request runs on, or None (no version of the
        split is READY, or every READY one has weight 0: the caller's default applies)."""
        models: list[LoadedModel] = []
        weights: list[float] = []
        for version, weight in self.weights.items():
            state = entry.versions.get(version)
            if weight > 0 and state is not None and state.state is ModelReadyState.READY \
                    and state.model is not None:
                models.append(state.model)
                weights.append(weight)
        if not models:
            return None
        if len(models) == 1:
            chosen = models[0]
        else:
            bounds = list(accumulate(weights))
            point = _point(request, self.sticky) * bounds[-1]
            chosen = models[min(bisect_right(bounds, point), len(models) - 1)]
        self.routed[chosen.version] = self.routed.get(chosen.version, 0) + 1
        return chosen


def _point(request: InferenceRequest, sticky: str) -> float:
    """A number in [0, 1): the hash of the sticky key when the request has one, else random."""
    key = request.parameters.get("sequence_id") or (request.parameters.get(sticky) if sticky else None)
    if key is None or key == "":
        return random.random()
    digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


__all__ = ["Split"]
