"""``--model-control-mode poll`` against files that never answer: a FIFO in a model folder (a
read of it blocks, as a read on a hung mount does) is skipped with a warning, every file
read of a poll is bounded in time, a poll that overruns is logged, and a stuck poll never
holds up the server's shutdown. Real snapshot code, real engine, real server process."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.engine.manager.poller import RepositoryPoller
from workbench.files.bounded_calls import BoundedCalls
from workbench.repository.repository import ModelRepository
from workbench.repository.snapshot import snapshot_repository
from workbench.testing.attack import release_fifo
from workbench.testing.log_records import watching
from workbench.testing.process import ServerProcess
from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub


def test_snapshot_skips_a_fifo_with_a_warning_and_sees_other_changes(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    os.mkfifo(folder / "notes.fifo")
    os.mkfifo(folder / "1" / "weights.fifo")
    repository = ModelRepository([tmp_path])
    result: dict = {}
    done = threading.Event()

    def scan() -> None:  # on a thread: before the fix the scan blocked forever on the FIFO
        try:
            result["first"] = snapshot_repository(repository)
            atomic_write(folder / "config.pbtxt", add_sub_config("add_sub", 4, 1))
            result["second"] = snapshot_repository(repository)
        finally:
            done.set()

    with watching("workbench.repository.snapshot", "not a regular file") as records:
        threading.Thread(target=scan, daemon=True).start()
        try:
            assert done.wait(20), "the snapshot blocked on a FIFO"
        finally:
            for fifo in (folder / "notes.fifo", folder / "1" / "weights.fifo"):
                release_fifo(fifo)
    assert result["first"]["add_sub"].model_digest != result["second"]["add_sub"].model_digest
    assert any("notes.fifo" in m and "not a regular file" in m for m in records.messages)
    assert any("weights.fifo" in m for m in records.messages)


def test_every_bounded_call_returns_in_time(tmp_path: Path) -> None:
    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    calls = BoundedCalls(timeout_s=0.2)

    def read_fifo() -> bytes:
        with open(fifo, "rb") as handle:  # blocks until a writer comes: a hung mount
            return handle.read()

    try:
        with pytest.raises(TimeoutError, match="hung"):
            calls.call("hung", read_fifo)
        with pytest.raises(TimeoutError, match="has not returned"):  # no second stuck thread
            calls.call("hung", read_fifo)
        assert calls.call("other", lambda: 42) == 42  # other calls are served meanwhile
    finally:
        release_fifo(fifo)


async def test_a_stuck_poll_is_logged_and_does_not_hold_up_stop(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    fifo = tmp_path.parent / f"{tmp_path.name}.hung"
    os.mkfifo(fifo)

    def sync() -> None:  # a remote repository's sync stuck on a mount that never answers
        with open(fifo, "rb") as handle:
            handle.read()

    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)
    try:
        with watching("workbench.engine.manager.poller", "still running") as records:
            async with Server(options) as server:
                poller = RepositoryPoller(server.repository_manager, ModelRepository([tmp_path]), 0.01, sync=sync,
                                          overrun_s=0.05)
                poller.start()
                assert await asyncio.to_thread(records.seen.wait, 20), records.messages
                await asyncio.wait_for(poller.stop(), 10)  # before: waited for the poll forever
    finally:
        release_fifo(fifo)
        fifo.unlink()


def test_a_poll_server_with_a_fifo_polls_on_and_stops_on_sigterm(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    folder = write_add_sub(repo)
    process = ServerProcess([f"--model-repository={repo}", "--model-control-mode=poll",
                             "--repository-poll-secs=0.1", "--exit-timeout-secs=5",
                             "--allow-grpc=false", "--allow-metrics=false"], timeout_s=60)
    fifos = [folder / "hung.fifo", folder / "1" / "hung.fifo"]
    try:
        for fifo in fifos:  # appear while the server polls: before the fix the next poll hung
            os.mkfifo(fifo)
        write_add_sub(tmp_path / "staging", "other")
        shutil.move(tmp_path / "staging" / "other", repo / "other")
        process.wait_for_log(r"not a regular file", timeout_s=20)
        process.wait_for_log(r"successfully loaded 'other' version 1", timeout_s=30)
    finally:
        status = process.stop(signal.SIGTERM, timeout_s=15)  # exit timeout 5 s, plus start-up slack
        for fifo in fifos:
            release_fifo(fifo)
    assert status == 0, process.log
