"""What the server knows about each model: per-version state, reason and loaded model."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.engine.inference.model import LoadedModel
from workbench.messages.types import ModelReadyState
from workbench.repository.overrides import OverrideDirectory

log = logging.getLogger(__name__)


@dataclass(slots=True)
class VersionState:
    """State of one version (Triton's ``ModelReadyState`` plus reason)."""

    state: ModelReadyState
    reason: str = ""
    model: LoadedModel | None = None


@dataclass(slots=True)
class ModelEntry:
    """One model: its config (None when it could not be read) and its versions.

    ``reason`` holds a model-level failure (unparsable config, no versions, ...).
    ``load_error`` is why the latest (re)load of this model failed while these versions
    kept serving ("" after a successful load); the repository index shows it as the
    reason of the READY versions.
    ``directory``: the temporary folder the model was loaded from when the load request
    carried file overrides; removed by :meth:`stop` and :meth:`release_directory`.
    ``blocked_versions``: set on an ensemble held UNAVAILABLE because its composing models,
    as loaded now, do not fit it (Triton's dependency-graph check): the versions it serves
    again once they do (:mod:`workbench.engine.manager.dependents`); None for every other entry.
    """

    name: str
    config: ModelConfig | None = None
    versions: dict[int, VersionState] = field(default_factory=dict)
    reason: str = ""
    latest_ready: LoadedModel | None = None
    load_error: str = ""
    directory: OverrideDirectory | None = None
    blocked_versions: tuple[int, ...] | None = None
    #: why the load that made this entry failed ("" when it succeeded), settled when the
    #: load switched, before anything else could change the model (an unload waiting for
    #: the load): what the load API answers; None for an entry no load made
    outcome: str | None = None

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Recompute the cached highest READY version (call after any state change)."""
        ready = [v for v, s in self.versions.items() if s.state is ModelReadyState.READY]
        self.latest_ready = self.versions[max(ready)].model if ready else None

    def ready_versions(self) -> list[int]:
        return sorted(v for v, s in self.versions.items() if s.state is ModelReadyState.READY)

    def failed(self) -> bool:
        """True when the load left this model (or a version of it) UNAVAILABLE with an error."""
        if self.reason and self.reason != "unloaded":
            return True
        return any(
            s.state is ModelReadyState.UNAVAILABLE and s.reason != "unloaded"
            for s in self.versions.values()
        )

    def unloaded(self) -> bool:
        """True when the model was unloaded (unload API, or its folder left the repository)
        and nothing of it serves or drains: for its ensembles it is then not available."""
        if not self.versions:
            return self.reason == "unloaded"
        return all(
            s.state is ModelReadyState.UNAVAILABLE and s.reason == "unloaded"
            for s in self.versions.values()
        )

    def failure_reason(self) -> str:
        """The model-level reason, else each UNAVAILABLE version's (Triton's load error
        text: "version 1 is at UNAVAILABLE state: <reason>;"). The versions unloaded again
        because another one failed (Triton fails the whole model) are left out, as
        Triton's load tracker lists only the versions that failed."""
        if self.reason:
            return self.reason
        pending = [(v, s) for v, s in sorted(self.versions.items()) if s.state is not ModelReadyState.READY]
        failed = [(v, s) for v, s in pending if s.state is ModelReadyState.UNAVAILABLE
                  and s.reason not in ("", "unloaded")]
        return "".join(f"version {v} is at {s.state.value} state: {s.reason};" for v, s in failed or pending)

    async def stop(self, reason: str = "unloaded", keep_failures: bool = False) -> None:
        """Drain and unload every loaded version; mark them UNAVAILABLE with ``reason``; then
        delete the override folder the model was loaded from, if any. The versions leave
        service first (UNLOADING: new requests get "... not at ready state" / "has no
        available versions") while their queued and executing requests finish. With
        ``keep_failures`` the versions that failed to load keep their own reason."""
        loaded = [(v, s) for v, s in self.versions.items() if s.model is not None]
        for _, state in loaded:
            state.state, state.reason = ModelReadyState.UNLOADING, ""
        self.refresh()
        await drain_versions(self.name, loaded, reason)
        drained = {id(state) for _, state in loaded}
        for state in self.versions.values():
            if id(state) in drained or (keep_failures and state.state is ModelReadyState.UNAVAILABLE):
                continue
            state.state, state.reason, state.model = ModelReadyState.UNAVAILABLE, reason, None
        self.refresh()
        if self.directory is not None:
            await asyncio.to_thread(self.release_directory)

    def settle(self) -> None:
        """Record :attr:`outcome`: the failure reason when the model (or a version of it)
        failed or has no READY version, else ""."""
        self.outcome = self.failure_reason() if self.failed() or not self.ready_versions() else ""

    def holds_instances(self) -> bool:
        """True when a version has a loaded model (READY, or draining)."""
        return any(s.model is not None for s in self.versions.values())

    def release_directory(self) -> None:
        """Delete the override folder this model was loaded from, if any (blocking, small)."""
        directory, self.directory = self.directory, None
        if directory is not None:
            directory.remove()


async def drain_versions(
    name: str, states: list[tuple[int, VersionState]], reason: str = "unloaded"
) -> None:
    """Let each version's queued and executing requests finish, unload its instances, then
    mark it UNAVAILABLE with ``reason`` (Triton's "unloaded").

    The caller has already taken the versions out of service (state UNLOADING, or a newer
    entry serving in their place), so nothing new reaches them; they stay UNLOADING here
    until their last request is answered. Never raises for a version's own stop errors
    (logged).
    """
    for _, state in states:
        state.state, state.reason = ModelReadyState.UNLOADING, ""
    models = [(v, s.model) for v, s in states if s.model is not None]
    results = await asyncio.gather(*(m.stop() for _, m in models), return_exceptions=True)
    for (version, _), result in zip(models, results, strict=True):
        if isinstance(result, BaseException):
            log.error("error while unloading '%s' version %d: %s", name, version, result)
        else:
            log.info("successfully unloaded '%s' version %d", name, version)
    for _, state in states:
        state.state, state.reason, state.model = ModelReadyState.UNAVAILABLE, reason, None
