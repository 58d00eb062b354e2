"""Live sequences survive a reload: versions that left service still serve the sequences
whose state they hold, until each ends; then they drain and unload.

Triton's reload loads the new model beside the old one and unloads the old one once its
in-flight requests are done; a sequence batcher's state lives on the old instances, so a
sequence still live at that moment loses it (its next request, without START, is refused).
The workbench keeps Triton's routing rule for sequences (the requests of one correlation ID
go to the instance holding its state) across the switch instead, so that a reload fails no
request:

- a reloaded version whose sequence batcher holds live sequences *retires*
  (:meth:`~workbench.scheduling.base.SequenceScheduler.retire`): a request of one of those
  sequences (a correlation ID it holds, without the START flag, for the model and for that
  version or the latest) runs there, with the state it has accumulated;
- every other request goes to the new versions, new sequences (START) included, so the
  same correlation ID may start afresh on the new version (its requests then go there; the
  sequence it replaces on the old version ends once its queued requests have run, as a
  START on a live sequence ends it in Triton);
- a sequence ends as usual: its END request answered, its START request failed, or
  released after ``max_sequence_idle_microseconds`` idle; when none is left, the version
  drains and unloads (UNLOADING meanwhile in the repository index if the reload dropped
  its version number);
- unloading the model or stopping the server ends the retirement at once (Triton's unload:
  requests in flight finish, sequence state is lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from workbench.engine.inference.model import LoadedModel
from workbench.engine.models.registry import VersionState, drain_versions
from workbench.messages.types import InferenceRequest

log = logging.getLogger(__name__)


class RetiringVersions:
    """The retiring versions of every model, and the tasks that unload them."""

    def __init__(self) -> None:
        self._models: dict[str, list[LoadedModel]] = {}
        self._tasks: dict[str, set[asyncio.Task]] = {}

    def __bool__(self) -> bool:
        """True while some version retires (the engine's per-request check is this)."""
        return bool(self._models)

    def holder(self, request: InferenceRequest) -> LoadedModel | None:
        """The retiring version that holds the live sequence ``request`` continues, if any
        (None for a START request, a request without correlation ID, or one pinned to
        another version number). A START request ends the sequence it replaces there."""
        models = self._models.get(request.model_name)
        if not models:
            return None
        params = request.parameters
        corr = params.get("sequence_id")
        if isinstance(corr, bool) or not isinstance(corr, (int, str)) or not corr:
            return None
        version = request.model_version
        for model in models:
            if version in ("", "-1", model.version_str) and model.holds_sequence(corr):
                if params.get("sequence_start"):  # Triton: a START ends the live sequence early
                    assert model.sequences is not None
                    model.sequences.end_sequence(corr)
                    continue
                return model
        return None

    def retire(
        self, name: str, states: list[tuple[int, VersionState]],
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Route the live sequences of ``states`` (versions just taken out of service, each
        holding some) to them from now on (synchronous: call it in the same step as the
        switch); in a task, wait until they have ended, drain and unload the versions, then
        await ``then()`` (e.g. delete their override folder)."""
        models = [s.model for _, s in states if s.model is not None]
        self._models.setdefault(name, []).extend(models)
        for version, state in states:
            assert state.model is not None
            log.info("'%s' version %d keeps serving its %d live sequence(s) until they end",
                     name, version, state.model.live_sequences())

        async def run() -> None:
            try:
                await asyncio.gather(*(m.sequences.retire() for m in models if m.sequences is not None))
            finally:
                self._forget(name, models)
            await drain_versions(name, states)
            if then is not None:
                await then()

        task = asyncio.ensure_future(run())
        tasks = self._tasks.setdefault(name, set())
        tasks.add(task)

        def done(_: asyncio.Task) -> None:
            tasks.discard(task)
            if not tasks and self._tasks.get(name) is tasks:
                del self._tasks[name]

        task.add_done_callback(done)

    def end(self, name: str | None = None) -> None:
        """End the retirement of ``name``'s versions (every model's when None) now: their
        in-flight requests finish, their remaining sequences are dropped."""
        names = [name] if name is not None else list(self._models)
        for model in [m for n in names for m in self._models.get(n, ())]:
            if model.sequences is not None:
                model.sequences.end_retirement()

    async def finished(self, name: str | None = None) -> None:
        """Wait until the retiring versions of ``name`` (of every model when None) have
        unloaded."""
        while True:
            names = [name] if name is not None else list(self._tasks)
            tasks = [t for n in names for t in self._tasks.get(n, ())]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    def _forget(self, name: str, models: list[LoadedModel]) -> None:
        remaining = [m for m in self._models.get(name, ()) if m not in models]
        if remaining:
            self._models[name] = remaining
        else:
            self._models.pop(name, None)


__all__ = ["RetiringVersions"]
