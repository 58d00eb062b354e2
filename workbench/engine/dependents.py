"""Ensembles follow their composing models: after a model's versions change (load, reload,
unload, a poll), the ensembles that call it, directly or through other ensembles, are
checked again against the composing models as loaded now.

Follows Triton's ``ModelRepositoryManager`` dependency graph: a composing model that is
modified, added or removed "unchecks" its downstream ensembles (``UpdateNodes``,
``AddNodes``, ``RemoveNode``), and ``LoadModelByDependency`` checks each of them again
(``CheckNode``, then ``ValidateEnsembleConfig``): an ensemble that no longer fits is
unloaded with the failure as its status, one that fits (again) is loaded. Here:

- a READY ensemble that no longer fits (a composing model unloaded or gone from the
  repository, an output renamed, a datatype or shape changed, a version its step names no
  longer loaded, ...) leaves service: its requests in flight finish, then its versions are
  UNAVAILABLE with the reason in Triton's words
  (:func:`~workbench.engine.ensembles.ensemble_error`, e.g. "ensemble e contains models
  that are not available or ambiguous: m"), and the entry remembers them
  (``ModelEntry.blocked_versions``);
- such an ensemble whose composing models fit again is READY again at once (an ensemble
  has no instances: nothing loads); so is an ensemble that failed this check at its own
  load, as Triton loads a node once its upstreams are satisfied;
- an ensemble that still fits is left as it is: its scheduler resolves its composing
  models for each request, so a compatible reload of a composing model fails none of its
  requests;
- ensembles unloaded by the API, or whose own load failed otherwise, are not touched.

Inner ensembles are checked before the ensembles that call them, each once per change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from workbench.config.normalize import is_ensemble
from workbench.engine.ensembles import ensemble_error, load_waves
from workbench.engine.loader import LoadedVersion, LoadResult
from workbench.engine.registry import ModelEntry
from workbench.engine.switching import switch_entry
from workbench.types import ModelReadyState

if TYPE_CHECKING:
    from workbench.engine.server import Server

log = logging.getLogger(__name__)


def dependents(changed: Iterable[str], dependencies: Mapping[str, Collection[str]]) -> set[str]:
    """Every model whose ensemble steps call one of ``changed``, directly or through other
    ensembles (``dependencies``: model -> the models its steps call)."""
    found: set[str] = set()
    frontier = set(changed)
    while frontier:
        callers = {n for n, calls in dependencies.items() if n not in found and frontier & set(calls)}
        found |= callers
        frontier = callers
    return found


async def recheck_dependents(server: Server, changed: Iterable[str]) -> None:
    """Check the ensembles that depend on ``changed`` again (see the module docstring);
    nothing once the server is stopping. Never raises for an ensemble's own failure (that
    is its state and reason)."""
    if server._stopping:
        return
    affected = dependents(changed, server._dependencies)
    if not affected:
        return
    for wave in load_waves({name: server._dependencies.get(name, ()) for name in affected}):
        await asyncio.gather(*(_recheck(server, name) for name in wave))


async def _recheck(server: Server, name: str) -> None:
    async with server._lock(name):
        entry = server._models.get(name)
        if server._stopping or entry is None or entry.config is None or not is_ensemble(entry.config):
            return
        held = entry.blocked_versions is not None
        if not held and not entry.ready_versions():
            return
        reason = ensemble_error(entry.config, server._models, server._dependencies)
        if reason and not held:
            await _hold(entry, reason)
        elif reason:
            _set_reason(entry, reason)
        elif held:
            _release(server, entry)


async def _hold(entry: ModelEntry, reason: str) -> None:
    """Take a READY ensemble out of service: UNAVAILABLE with ``reason`` once drained."""
    log.error("ensemble '%s' is unavailable, its composing models changed: %s", entry.name, reason)
    entry.blocked_versions = tuple(entry.ready_versions())
    entry.load_error = ""
    await entry.stop(reason, keep_failures=True)


def _set_reason(entry: ModelEntry, reason: str) -> None:
    """A held ensemble still does not fit: show why it does not now."""
    if not entry.versions:
        entry.reason = reason
    for version in entry.blocked_versions or ():
        state = entry.versions.get(version)
        if state is not None and state.state is ModelReadyState.UNAVAILABLE:
            state.reason = reason


def _release(server: Server, entry: ModelEntry) -> None:
    """Serve a held ensemble again: a fresh entry (new schedulers and statistics) for the
    versions it had, from the config it was loaded with."""
    versions = entry.blocked_versions or ()
    result = LoadResult(entry.name, config=entry.config, chosen=list(versions),
                        versions={v: LoadedVersion() for v in versions})
    fresh = server._entry_for(result)
    switch_entry(server._models, entry, fresh)
    if fresh.ready_versions():
        log.info("ensemble '%s' is available again: its composing models fit it", entry.name)


__all__ = ["dependents", "recheck_dependents"]
