"""EngineStore: callbacks reach the engine on its loop, from the loop or from another thread;
failures become one line for an error pane."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from workbench import InvalidArgument, Server
from workbench.ui.shared.store import EngineStore, error_text


async def test_spawn_runs_on_the_engine_loop_from_the_loop_and_from_a_thread(store: EngineStore) -> None:
    loop_thread = threading.get_ident()
    ran_on = []

    async def probe(tag: str) -> None:
        await asyncio.sleep(0.01)
        ran_on.append((tag, threading.get_ident(), asyncio.get_running_loop() is store.loop))

    store.spawn(probe("loop"))
    await asyncio.to_thread(lambda: store.spawn(probe("thread")))  # e.g. a Panel thread pool
    await store.settle()
    assert sorted(ran_on) == [("loop", loop_thread, True), ("thread", loop_thread, True)]


async def test_settle_waits_for_tasks_started_by_tasks_and_times_out(store: EngineStore) -> None:
    done = []

    async def inner() -> None:
        await asyncio.sleep(0.05)
        done.append("inner")

    async def outer() -> None:
        store.spawn(inner())

    store.spawn(outer())
    await store.settle()
    assert done == ["inner"]
    slow = store.spawn(asyncio.sleep(5))
    with pytest.raises(TimeoutError):
        await store.settle(timeout_s=0.1)
    slow.cancel()


async def test_attempt_shows_engine_errors_as_one_line(server: Server, store: EngineStore,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    shown: list[str] = []
    assert await store.attempt(lambda: server.load_model("nope"), shown.append) is None
    assert shown == ["failed to load 'nope', failed to poll from model repository"]  # for a person

    async def bug() -> None:
        raise KeyError("x")

    with caplog.at_level(logging.ERROR, logger="workbench.ui.shared.store"):
        assert await store.attempt(bug, shown.append) is None
    assert shown[-1] == "unexpected error (logged on the server): 'x'"
    assert "Traceback" in caplog.text  # the bug's traceback goes to the log, not the pane
    assert error_text(InvalidArgument("bad")) == "InvalidArgument: bad"
