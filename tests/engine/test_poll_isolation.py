"""``--model-control-mode poll``: one bad model never stops the polling of the others (issue
30, finding 4; a big config.pbtxt, finding 7). A FIFO where a load opens a file (the config,
a model file, a label file, a warmup data file), a model folder nested 1,800 folders deep, a
config larger than ``--model-config-max-size``, or a load that never ends: that model fails
(or keeps serving its last good versions) with the reason, and a change to another model is
still applied. Real engine, real ONNX models; the fake backend only where a load must block.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from workbench import Server, ServerOptions
from workbench.testing.attack import (
    OPENED_AT_LOAD,
    nested_folders,
    plant_fifo,
    release_fifo,
    remove_tree,
    write_victim,
)
from workbench.testing.fake_backend import write_fake_model
from workbench.testing.log_records import watching
from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub


def poll_server(repo: Path, **options: Any) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="poll",
                                repository_poll_secs=0, **options))


async def rows(server: Server, name: str) -> list[tuple[str, str, str]]:
    return [(r.get("version", ""), r.get("state", ""), r.get("reason", ""))
            for r in await server.repository_index() if r["name"] == name]


async def change_other_and_poll(server: Server, repo: Path) -> None:
    """Rewrite ``other``'s config (max_batch_size 8 -> 4), poll, and check it serves it."""
    atomic_write(repo / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
    await asyncio.wait_for(server.poll_repository(), 60)  # before the fix: blocked for good
    assert (await server.model_config("other")).max_batch_size == 4


@pytest.mark.parametrize("where", OPENED_AT_LOAD)
async def test_a_fifo_opened_at_load_fails_that_model_and_polling_goes_on(tmp_path: Path, where: str) -> None:
    write_victim(tmp_path, "victim")
    write_add_sub(tmp_path, "other", 8, 1)
    fifo = tmp_path / "victim" / where
    try:
        async with poll_server(tmp_path) as server:
            plant_fifo(fifo)
            await asyncio.wait_for(server.poll_repository(), 60)  # before the fix: never returned
            [(version, state, reason)] = await rows(server, "victim")
            assert (version, state) == ("1", "READY")  # the last good version keeps serving
            assert "not a regular file (a FIFO)" in reason and fifo.name in reason
            await change_other_and_poll(server, tmp_path)
    finally:
        release_fifo(fifo)  # a reader blocked on it (before the fix) goes


async def test_a_model_folder_nested_too_deep_fails_that_model_and_polling_goes_on(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "victim", 8, 1)
    write_add_sub(repo, "other", 8, 1)
    deep = nested_folders(tmp_path / "deep", 1800)
    try:
        async with poll_server(repo) as server:
            deep.rename(repo / "victim" / "deep")
            await server.poll_repository()  # before the fix: RecursionError, every poll
            [(version, state, reason)] = await rows(server, "victim")
            assert (version, state) == ("1", "READY")
            assert "is nested more than 64 folders deep" in reason
            await change_other_and_poll(server, repo)
            remove_tree(repo / "victim" / "deep")  # fixed: the model loads again
            await server.poll_repository()
            assert await rows(server, "victim") == [("1", "READY", "")]
    finally:
        for path in (deep, repo / "victim" / "deep"):
            remove_tree(path)


async def test_a_config_larger_than_the_limit_fails_that_model_before_it_is_read(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "other", 8, 1)
    folder = write_add_sub(tmp_path, "big", 8, 1)
    padding = "# a comment line of 64 bytes, many times over ...................\n" * 17_000
    atomic_write(folder / "config.pbtxt", add_sub_config("big", 8, 1) + padding)  # 1.04 MiB
    size = (folder / "config.pbtxt").stat().st_size
    async with poll_server(tmp_path, exit_on_error=False) as server:
        reason = (f"failed to read text proto from {folder / 'config.pbtxt'}: {size} bytes, more "
                  "than the 1048576 bytes allowed (--model-config-max-size)")
        assert await rows(server, "big") == [("", "UNAVAILABLE", reason)]
        await change_other_and_poll(server, tmp_path)
    async with poll_server(tmp_path, model_config_max_size=2 << 20) as server:  # the flag lets it in
        assert await rows(server, "big") == [("1", "READY", "")]


async def test_a_load_that_never_ends_holds_up_no_other_model(tmp_path: Path, fake_backend) -> None:
    write_fake_model(tmp_path, "stuck", count=1)
    write_add_sub(tmp_path, "other", 8, 1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0.05)
    with watching("workbench.engine.models.entries", "successfully loaded 'other'") as other_loaded:
        async with Server(options) as server:
            fake_backend.load_gate.clear()  # stuck's next load blocks until the gate opens
            try:
                write_fake_model(tmp_path, "stuck", count=1, extra="dynamic_batching { }\n")
                assert await asyncio.to_thread(fake_backend.loading.wait, 30)
                other_loaded.seen.clear()
                atomic_write(tmp_path / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
                # before the fix: the periodic poll waited for stuck's load, and never saw this
                assert await asyncio.to_thread(other_loaded.seen.wait, 60), other_loaded.messages
                assert (await server.model_config("other")).max_batch_size == 4
                assert not fake_backend.load_gate.is_set()  # stuck was loading all along
            finally:
                fake_backend.load_gate.set()
            await asyncio.wait_for(server.poll_repository(), 60)  # waits for stuck's load
            assert (await server.model_config("stuck")).HasField("dynamic_batching")


async def test_config_text_is_never_parsed_on_the_event_loop(tmp_path: Path) -> None:
    """The config editor's validation and a poll's load parse on worker threads: the event
    loop's thread never enters protobuf's text parser (a 1 MiB config takes seconds to parse,
    health probes would wait that long)."""
    write_add_sub(tmp_path, "other", 8, 1)
    async with poll_server(tmp_path) as server:
        with parses_on_this_thread() as parses:
            problems = await server.config_files.validate_model_config_text(
                "other", add_sub_config("other", 4, 1))
            atomic_write(tmp_path / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
            await server.poll_repository()
        assert problems == [] and (await server.model_config("other")).max_batch_size == 4
        assert parses == []  # before the fix: the editor's validation parsed on the loop


@contextlib.contextmanager
def parses_on_this_thread() -> Iterator[list[str]]:
    """Record each call of ``google.protobuf.text_format``'s ``Parse`` / ``Merge`` made on
    the calling thread meanwhile (``sys.setprofile`` applies to this thread only)."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event == "call" and code.co_name in ("Parse", "Merge") and code.co_filename.endswith("text_format.py"):
            calls.append(f"{code.co_name} on {threading.current_thread().name}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)
