"""An engine in this process for one measured model: what ``workbench perf
--service-kind=triton_c_api`` and ``workbench tune`` without ``-u`` start around a run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from workbench import Server, ServerOptions, WorkbenchError
from workbench.perf.errors import PerfError, error_text


@contextlib.asynccontextmanager
async def started_engine(repository: str, model: str) -> AsyncIterator[Server]:
    """A started :class:`workbench.Server` over ``repository`` in explicit model control
    mode with only ``model`` (and what it needs) loaded; stopped on exit.

    Raises:
        PerfError: the engine failed to start ("failed to start the in-process server: ...").
    """
    options = ServerOptions(model_repository=[repository], model_control_mode="explicit", load_model=[model])
    try:
        server = Server(options)
        await server.start()
    except (WorkbenchError, OSError, ValueError) as exc:
        raise PerfError(f"failed to start the in-process server: {error_text(exc)}") from None
    try:
        yield server
    finally:
        await server.stop()


__all__ = ["started_engine"]
