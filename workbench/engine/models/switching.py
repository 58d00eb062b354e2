"""Hot reload: how a freshly loaded model entry takes over from the one serving.

Follows Triton's ``ModelLifeCycle`` ("model availability on reload"): the new versions load
beside the serving ones (in the background, the serving versions stay READY); when the
load has finished, traffic switches in one step on the event loop (the engine resolves
``model -> version`` per request from the entry in its registry, so replacing the entry is
atomic for every request that has not been resolved yet); the versions that left service
then drain: requests already queued or executing on them finish, then their instances
unload. If any version of the new load failed while the model still has READY versions,
the load is dropped as a whole and the old versions keep serving; without READY versions
the model fails as a whole too: the versions that did load unload again (UNAVAILABLE
"unloaded"), as Triton's ``OnLoadFinal`` releases every version of a failed load.

Versions the caller keeps (``reused``: unchanged READY versions of a poll-triggered
version-level reload) are the same objects in the old and the new entry and never drain.
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping
from dataclasses import dataclass, field

from workbench.engine.models.registry import ModelEntry, VersionState
from workbench.messages.types import ModelReadyState


@dataclass(slots=True)
class Switch:
    """Outcome of :func:`switch_entry`.

    Attributes:
        entry: the entry that serves now (the new one, or the old one when the load failed).
        kept_old: True when the new load failed and the old versions kept serving.
        drain: versions to drain then unload, by version (old versions that left service,
            or the new load's versions when it was dropped). Already out of service: every
            one is UNLOADING (those still listed in the index show it) or unreachable.
    """

    entry: ModelEntry
    kept_old: bool = False
    drain: list[tuple[int, VersionState]] = field(default_factory=list)


def switch_entry(
    models: MutableMapping[str, ModelEntry],
    old: ModelEntry | None,
    new: ModelEntry,
    reused: Collection[int] = (),
) -> Switch:
    """Install ``new`` in ``models`` in place of ``old`` (synchronously: no request can be
    resolved half-way), or keep ``old`` serving when ``new`` failed.

    - ``new`` failed and ``old`` has READY versions: ``old`` stays, with the failure as its
      ``load_error`` (shown by the repository index); ``new``'s loaded versions drain.
    - ``new`` failed otherwise: it is installed with the versions it did load out of
      service (they drain and become UNAVAILABLE "unloaded"; the failed ones keep their
      reason), and so is nothing of ``old``'s.
    - otherwise ``new`` serves. ``old``'s loaded versions that ``new`` replaces drain
      unseen; those ``new`` does not have any more (a version removed from disk or no longer
      selected by the version policy) stay listed in ``new`` as UNLOADING while they drain,
      then UNAVAILABLE "unloaded" (Triton's states), so a request pinned to such a version
      gets "... is not at ready state" while the ones already queued on it finish.
    """
    reused = set(reused)
    if old is not None and old.ready_versions() and new.failed():
        old.load_error = new.failure_reason()
        drop = [(v, s) for v, s in new.versions.items() if s.model is not None and v not in reused]
        return Switch(old, kept_old=True, drain=_out_of_service(drop))
    drain: list[tuple[int, VersionState]] = []
    if new.failed():  # Triton fails the whole model: what did load unloads again
        drain.extend((v, s) for v, s in new.versions.items() if s.model is not None and v not in reused)
    if old is not None:
        for version, state in old.versions.items():
            if state.model is None or new.versions.get(version) is state:
                continue
            if version not in new.versions:
                new.versions[version] = state  # listed as UNLOADING while it drains
            drain.append((version, state))
    _out_of_service(drain)
    new.refresh()
    models[new.name] = new
    return Switch(new, drain=drain)


def _out_of_service(states: list[tuple[int, VersionState]]) -> list[tuple[int, VersionState]]:
    for _, state in states:
        state.state, state.reason = ModelReadyState.UNLOADING, ""
    return states


__all__ = ["Switch", "switch_entry"]
