"""Ensembles follow their composing models: after a model's versions change (load, reload,
unload, a poll), the ensembles that call it, directly or through other ensembles, are
checked again against the composing models as loaded now.

Follows Triton's ``ModelRepositoryManager`` dependency graph (``UpdateNodes`` / ``AddNodes``
/ ``RemoveNode`` uncheck the downstream ensembles, ``LoadModelByDependency`` checks them
again: ``CheckNode``, ``ValidateEnsembleConfig``). Here:

- a READY ensemble that no longer fits leaves service once its requests in flight finish:
  UNAVAILABLE with Triton's reason (:func:`~workbench.engine.models.ensembles.ensemble_error`),
  remembered in ``ModelEntry.blocked_versions``;
- one whose composing models fit again is READY at once (nothing to load), as is one that
  failed this check at its own load;
- one that still fits is left as it is (its scheduler resolves composing models per
  request), unless it changed what it derives from them (a composing model reloaded as
  decoupled, or back): then it loads again (its requests in flight finish on the old copy);
- ensembles unloaded by the API, or whose own load failed otherwise, are not touched.

Inner ensembles are checked before the ensembles that call them, each once per change.
User view: docs/ensembles.md and docs/model-control.md."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from workbench.config.normalize import is_ensemble
from workbench.engine.models.ensembles import ensemble_error, load_waves, with_transaction_policy
from workbench.engine.models.registry import ModelEntry
from workbench.messages.types import ModelReadyState

log = logging.getLogger(__name__)


class Lifecycle(Protocol):
    """What the recheck reads and changes of the model lifecycle: the public API of
    :class:`~workbench.engine.models.lifecycle.ModelLifecycle` (a protocol: the repository manager,
    :mod:`workbench.engine.manager.repository_manager`, calls :func:`recheck_dependents` with its
    lifecycle, which imports neither)."""

    @property
    def stopping(self) -> bool: ...

    @property
    def models(self) -> Mapping[str, ModelEntry]: ...

    @property
    def dependencies(self) -> Mapping[str, tuple[str, ...]]: ...

    def lock(self, name: str) -> asyncio.Lock: ...

    def serve_again(self, entry: ModelEntry, versions: tuple[int, ...]) -> ModelEntry: ...

    def reload_ensemble(self, entry: ModelEntry) -> ModelEntry: ...


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


async def recheck_dependents(lifecycle: Lifecycle, changed: Iterable[str]) -> None:
    """Check the ensembles that depend on ``changed`` again (see the module docstring);
    nothing once the server is stopping. Never raises for an ensemble's own failure (that
    is its state and reason)."""
    if lifecycle.stopping:
        return
    affected = dependents(changed, lifecycle.dependencies)
    if not affected:
        return
    for wave in load_waves({name: lifecycle.dependencies.get(name, ()) for name in affected}):
        await asyncio.gather(*(_recheck(lifecycle, name) for name in wave))


async def _recheck(lifecycle: Lifecycle, name: str) -> None:
    async with lifecycle.lock(name):
        entry = lifecycle.models.get(name)
        if lifecycle.stopping or entry is None or entry.config is None or not is_ensemble(entry.config):
            return
        held = entry.blocked_versions is not None
        if not held and not entry.ready_versions():
            return
        reason = ensemble_error(entry.config, lifecycle.models, lifecycle.dependencies)
        if reason and not held:
            await _hold(entry, reason)
        elif reason:
            _set_reason(entry, reason)
        elif held:
            _release(lifecycle, entry)
        elif with_transaction_policy(entry.config, lifecycle.models) is not entry.config:
            log.info("ensemble '%s' is loaded again: whether it is decoupled follows its "
                     "composing models", entry.name)
            lifecycle.reload_ensemble(entry)


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


def _release(lifecycle: Lifecycle, entry: ModelEntry) -> None:
    """Serve a held ensemble again: a fresh entry (new schedulers and statistics) for the
    versions it had, from the config it was loaded with."""
    fresh = lifecycle.serve_again(entry, entry.blocked_versions or ())
    if fresh.ready_versions():
        log.info("ensemble '%s' is available again: its composing models fit it", entry.name)


__all__ = ["Lifecycle", "dependents", "recheck_dependents"]
