"""What requests, responses and models need of a server and a model (protocols), so that the
modules of this package import each other one way only."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

import workbench
from workbench.tritonserver._loop import EngineLoop

T = TypeVar("T")


class ServerRef(Protocol):
    """A started :class:`~workbench.tritonserver.Server` as its models use it."""

    @property
    def engine(self) -> workbench.Server: ...

    @property
    def engine_loop(self) -> EngineLoop: ...

    def check_started(self) -> None: ...

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T: ...


class ModelRef(Protocol):
    """A :class:`~workbench.tritonserver.Model` as requests and responses use it."""

    name: str
    version: int
    server: ServerRef

    def at_version(self, name: str, version: int) -> ModelRef: ...


__all__ = ["ModelRef", "ServerRef"]
