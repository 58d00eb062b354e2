"""Rollouts inside the server: a weighted split of a model's unversioned requests between its
versions, a mirror (shadow) of a share of them on a candidate version, and promote / roll
back of the candidate through the model's version policy. Beyond Triton (which has none).

``server.rollouts`` (:class:`RolloutService`) is the API the HTTP routes
(``/v2/models/{m}/rollout``), the dashboard and notebooks call (``set``, ``get``, ``settle``,
``promote``, ``rollback``; examples in docs/rollouts.md). Everything applies hot: the split is
read per request where the engine resolves the version
(:class:`~workbench.engine.models.rollout_split.Split`), the mirror after each primary response
(:class:`~workbench.engine.rollout.mirror.Mirror`); setting, replacing or clearing drops no request.

Promote: traffic goes to the candidate at once, then the config file is written with
``version_policy { specific { versions: [N] } }`` through
:meth:`~workbench.engine.manager.config_files.ConfigFileService.write_model_config` and hot-reloaded;
the rollout is then cleared. Rollback reverts the file to that ``.bak``
(:meth:`~workbench.engine.manager.config_files.ConfigFileService.revert_model_config`; ``ConfigConflict``
when the file changed since), reloads, and restores the rollout set before the promote. Both
need ``--model-control-mode`` ``explicit`` or ``poll``."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from workbench.common.errors import InvalidArgument, ModelNotFound, NotFound, Unsupported, WorkbenchError
from workbench.config.model_config import model_config_to_text, parse_model_config
from workbench.engine.inference.model import LoadedModel
from workbench.engine.manager.config_files import ConfigFileService
from workbench.engine.models.lifecycle import ModelLifecycle
from workbench.engine.models.registry import ModelEntry
from workbench.engine.models.rollout_split import Split
from workbench.engine.rollout.mirror import Mirror
from workbench.messages.types import InferenceRequest, InferenceResponse

#: the default cap of mirrored requests in flight per rollout
DEFAULT_MIRROR_MAX_IN_FLIGHT = 4
#: the largest cap a rollout may set
MAX_MIRROR_IN_FLIGHT = 1024
_MAX_STICKY_LENGTH = 256


@dataclass(frozen=True)
class RolloutSpec:
    """What a rollout asks for (validated by :meth:`RolloutService.set`)."""

    weights: dict[int, float]
    sticky: str = ""
    candidate: int | None = None
    mirror_percent: float = 0.0
    mirror_max_in_flight: int = DEFAULT_MIRROR_MAX_IN_FLIGHT

    def to_json(self) -> dict[str, Any]:
        return {"weights": {str(v): w for v, w in sorted(self.weights.items())}, "sticky": self.sticky,
                "candidate": self.candidate, "mirror_percent": self.mirror_percent,
                "mirror_max_in_flight": self.mirror_max_in_flight}


@dataclass
class _Promotion:
    """What a promote changed, for its rollback."""

    version: int
    file_version: str
    previous: RolloutSpec | None


class RolloutService:
    """The rollouts of the server's models (module docstring).

    Args:
        lifecycle: the models (the split lives in its ``splits``).
        config_files: the config-file service promote and rollback write through.
    """

    def __init__(self, lifecycle: ModelLifecycle, config_files: ConfigFileService) -> None:
        self._lifecycle = lifecycle
        self._config_files = config_files
        self._specs: dict[str, RolloutSpec] = {}
        self._mirrors: dict[str, Mirror] = {}
        self._promotions: dict[str, _Promotion] = {}
        self._changing = asyncio.Lock()

    # ----------------------------------------------------------------- set / get / clear
    async def set(self, model: str, weights: dict[Any, Any] | None = None, *, sticky: str = "",
                  candidate: int | str | None = None, mirror_percent: float = 0.0,
                  mirror_max_in_flight: int = DEFAULT_MIRROR_MAX_IN_FLIGHT) -> dict[str, Any]:
        """Set or replace the rollout of ``model``, at once for the next request.

        Args:
            weights: version -> weight (a number >= 0; versions as int or decimal text);
                unversioned requests go to the READY versions in proportion. Empty or None:
                no split (the latest READY version serves, as without a rollout).
            sticky: a request parameter whose value picks the version by hash ("" = none).
            candidate: the version mirrored requests run on (None: no mirror).
            mirror_percent: the share of primary requests also run on ``candidate``, 0-100.
            mirror_max_in_flight: the most mirrored requests at once (1-1024); copies beyond
                it, and copies of requests answered while their primary version is busy, are
                shed (:mod:`workbench.engine.rollout.mirror`).

        Returns:
            :meth:`get`'s report.

        Raises:
            ModelNotFound: the server does not know ``model``.
            InvalidArgument: a version the model does not have (in any state), a negative or
                non-finite weight, all weights 0, a mirror share outside 0-100, a cap outside
                1-1024, or a mirror share without a candidate.
        """
        spec = self._validated(model, weights or {}, sticky, candidate, mirror_percent, mirror_max_in_flight)
        self._apply(model, spec)
        return await self.get(model)

    async def clear(self, model: str) -> None:
        """Remove the rollout of ``model`` (nothing when it has none): unversioned requests go
        to the latest READY version again; mirrored requests in flight finish, unreported."""
        self._apply(model, None)

    async def get(self, model: str) -> dict[str, Any]:
        """The rollout of ``model`` and its live report: ``{"model", "rollout" (the spec, or
        None), "routed" (version -> requests the split sent there), "mirror" (the mirror's
        report, or None; see :meth:`~workbench.engine.rollout.mirror.Mirror.report`), "promoted" (the
        version a promote made the served one and a rollback can undo, or None)}``.

        Raises:
            ModelNotFound: the server does not know ``model``.
        """
        self._entry(model)
        spec = self._specs.get(model)
        split = self._lifecycle.splits.get(model)
        mirror = self._mirrors.get(model)
        promotion = self._promotions.get(model)
        return {"model": model, "rollout": spec.to_json() if spec else None,
                "routed": {str(v): n for v, n in sorted(split.routed.items())} if split else {},
                "mirror": mirror.report() if mirror else None,
                "promoted": promotion.version if promotion else None}

    async def settle(self, model: str) -> None:
        """Wait until no mirrored request of ``model`` is in flight (a notebook cell or a test
        reading the report after its traffic; nothing when it does not mirror)."""
        mirror = self._mirrors.get(model)
        if mirror is not None:
            await mirror.settle()

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        """:meth:`get` of every model with a rollout (or a promotion to roll back)."""
        return {name: await self.get(name) for name in sorted(set(self._specs) | set(self._promotions))
                if name in self._lifecycle.models}

    # ----------------------------------------------------------------- the request path
    @property
    def mirroring(self) -> bool:
        """True when some rollout mirrors (the one check ``Server.infer`` makes per request)."""
        return bool(self._mirrors)

    def offer(self, request: InferenceRequest, model: LoadedModel, response: InferenceResponse,
              arrival_ns: int) -> None:
        """Hand an answered primary request to its model's mirror, if any
        (:meth:`~workbench.engine.rollout.mirror.Mirror.offer`; returns at once)."""
        mirror = self._mirrors.get(request.model_name)
        if mirror is not None:
            mirror.offer(request, model, response, arrival_ns)

    # ----------------------------------------------------------------- promote / rollback
    async def promote(self, model: str, version: int | str | None = None) -> dict[str, Any]:
        """Make ``version`` (default: the rollout's candidate) the one served version of
        ``model`` (module docstring). Traffic moves to it first, then the policy is written
        and reloaded; no request fails (the reload is hot).

        Returns:
            ``{"model", "promoted" (the version), "config"
            (:class:`~workbench.common.results.ConfigWriteResult`)}``; when the reload failed
            (``config["reloaded"]`` False) the rollout before is restored and ``promoted`` is
            None.

        Raises:
            ModelNotFound: unknown model.
            InvalidArgument: no version given and no candidate set, or an unknown version.
            Unsupported: ``--model-control-mode none`` (nothing would reload).
            InvalidModelConfig / ConfigConflict: as ``write_model_config``.
        """
        self._check_mode()
        async with self._changing:
            spec = self._specs.get(model)
            if version is None:
                if spec is None or spec.candidate is None:
                    raise InvalidArgument(f"rollout of '{model}' has no candidate to promote")
                version = spec.candidate
            target = self._version(model, version)
            current = await self._config_files.model_config_file(model)
            config = parse_model_config(current["text"], current["path"]) if current["text"] else None
            text = _with_specific_version(config, model, target)
            self._apply(model, RolloutSpec({target: 1.0}))
            try:
                result = await self._config_files.write_model_config(
                    model, text, expected_version=current["version"])
            except WorkbenchError:
                self._apply(model, spec)
                raise
            if not result["reloaded"]:
                self._apply(model, spec)
                return {"model": model, "promoted": None, "config": result}
            self._apply(model, None)
            self._promotions[model] = _Promotion(target, result["version"], spec)
            return {"model": model, "promoted": target, "config": result}

    async def rollback(self, model: str) -> dict[str, Any]:
        """Undo the last promote of ``model``: its config file back from the ``.bak`` the
        promote wrote, reloaded, and the rollout before the promote set again (when its
        versions are still known). No request fails (the reload is hot).

        Returns:
            ``{"model", "restored" (the rollout set again, or None), "config"
            (:class:`~workbench.common.results.ConfigWriteResult` of the revert)}``.

        Raises:
            NotFound: no promote of ``model`` to roll back.
            ConfigConflict: the config file changed since the promote (nothing is written).
            Unsupported: ``--model-control-mode none``.
        """
        self._check_mode()
        async with self._changing:
            promotion = self._promotions.get(model)
            if promotion is None:
                raise NotFound(f"no promote of model '{model}' to roll back")
            result = await self._config_files.revert_model_config(model, expected_version=promotion.file_version)
            del self._promotions[model]
            restored = None
            previous = promotion.previous
            if result["reloaded"] and previous is not None:
                known = self._entry(model).versions
                if all(v in known for v in [*previous.weights, previous.candidate] if v is not None):
                    self._apply(model, previous)
                    restored = previous.to_json()
            return {"model": model, "restored": restored, "config": result}

    async def close(self) -> None:
        """Stop mirroring and wait for the mirrored requests in flight (server stop)."""
        mirrors = list(self._mirrors.values())
        self._mirrors.clear()
        for mirror in mirrors:
            await mirror.close()

    # ----------------------------------------------------------------- internals
    def _apply(self, model: str, spec: RolloutSpec | None) -> None:
        """Install ``spec`` (None: remove the rollout) in one step on the event loop."""
        splits = self._lifecycle.splits
        if spec is None:
            self._specs.pop(model, None)
            splits.pop(model, None)
            self._mirrors.pop(model, None)
            return
        self._specs[model] = spec
        if spec.weights:
            old = splits.get(model)
            split = Split(dict(spec.weights), spec.sticky)
            if old is not None and old.weights == split.weights:
                split.routed = old.routed
            splits[model] = split
        else:
            splits.pop(model, None)
        mirror = self._mirrors.get(model)
        if spec.candidate is None or spec.mirror_percent <= 0:
            self._mirrors.pop(model, None)
        elif mirror is not None and mirror.candidate == spec.candidate:
            mirror.percent = spec.mirror_percent
            mirror.max_in_flight = spec.mirror_max_in_flight
        else:
            self._mirrors[model] = Mirror(model, spec.candidate, spec.mirror_percent,
                                          spec.mirror_max_in_flight, self._lifecycle.resolve)

    def _validated(self, model: str, weights: dict[Any, Any], sticky: str, candidate: int | str | None,
                   percent: float, cap: int) -> RolloutSpec:
        if not isinstance(weights, dict):
            raise InvalidArgument("rollout weights must be an object of version -> weight")
        parsed: dict[int, float] = {}
        for key, weight in weights.items():
            version = self._version(model, key)
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                    or weight < 0:
                raise InvalidArgument(f"rollout weight of version {version} must be a number >= 0, got {weight!r}")
            parsed[version] = float(weight)
        if parsed and not any(parsed.values()):
            raise InvalidArgument("rollout weights are all 0")
        if not isinstance(sticky, str) or len(sticky) > _MAX_STICKY_LENGTH:
            raise InvalidArgument(f"rollout sticky must be a parameter name of at most {_MAX_STICKY_LENGTH} "
                                  "characters")
        if isinstance(percent, bool) or not isinstance(percent, int | float) or not 0 <= percent <= 100:
            raise InvalidArgument(f"rollout mirror_percent must be a number from 0 to 100, got {percent!r}")
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_MIRROR_IN_FLIGHT:
            raise InvalidArgument(f"rollout mirror_max_in_flight must be an integer from 1 to "
                                  f"{MAX_MIRROR_IN_FLIGHT}, got {cap!r}")
        target = None if candidate is None else self._version(model, candidate)
        if percent > 0 and target is None:
            raise InvalidArgument("rollout mirror_percent needs a candidate version")
        return RolloutSpec(parsed, sticky, target, float(percent), cap)

    def _entry(self, model: str) -> ModelEntry:
        entry = self._lifecycle.models.get(model)
        if entry is None:
            raise ModelNotFound(f"Request for unknown model: '{model}' is not found")
        return entry

    def _version(self, model: str, value: object) -> int:
        """``value`` as a version ``model`` has (in any state).

        Raises:
            ModelNotFound: unknown model. InvalidArgument: not a version number, or unknown.
        """
        known = self._entry(model).versions
        try:
            version = int(str(value), 10) if not isinstance(value, bool) else -1
        except ValueError:
            raise InvalidArgument(f"rollout version must be a version number, got {value!r}") from None
        if version not in known:
            have = ", ".join(str(v) for v in sorted(known)) or "none"
            raise InvalidArgument(f"rollout of '{model}' names unknown version {version} (known: {have})")
        return version

    def _check_mode(self) -> None:
        if self._lifecycle.options.model_control_mode == "none":
            raise Unsupported("promote and rollback reload the model: they need --model-control-mode "
                              "explicit or poll")


def _with_specific_version(config: Any, model: str, version: int) -> str:
    """The config text with ``version_policy { specific { versions: [version] } }`` (a config
    file that does not exist yet: one naming the model and that policy)."""
    if config is None:
        config = parse_model_config(f'name: "{model}"')
    config.version_policy.specific.versions[:] = [version]
    return model_config_to_text(config)


__all__ = ["DEFAULT_MIRROR_MAX_IN_FLIGHT", "MAX_MIRROR_IN_FLIGHT", "RolloutService", "RolloutSpec"]
