"""How the server opens and walks a repository's files (:mod:`workbench.files.model_files`): a FIFO is
refused without being opened (opening it would block), a file over the limit is refused
before it is read, a tree is walked without recursion and within bounds."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from workbench.files.model_files import (
    FileTooLarge,
    NotRegularFile,
    TreeTooLarge,
    check_model_path,
    check_model_tree,
    read_file,
    read_prefix,
    walk_tree,
)
from workbench.testing.attack import nested_folders, plant_fifo, release_fifo, remove_tree


def on_a_thread(fn):
    """``fn()`` on a daemon thread: its result or exception, or a failure when it blocks."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # noqa: BLE001  # handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "blocked"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = plant_fifo(tmp_path / "config.pbtxt")
    os.symlink(fifo, tmp_path / "link")
    try:
        for path in (fifo, tmp_path / "link"):
            with pytest.raises(NotRegularFile, match=r"^not a regular file \(a FIFO\)$"):
                on_a_thread(lambda path=path: read_file(path, 1024))
            with pytest.raises(NotRegularFile):
                on_a_thread(lambda path=path: read_prefix(path, 10))
            with pytest.raises(NotRegularFile):
                on_a_thread(lambda path=path: check_model_path(path))
    finally:
        release_fifo(fifo)


def test_sizes_and_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_file(path, 10) == b"0123456789"
    with pytest.raises(FileTooLarge, match=r"^10 bytes, more than the 9 bytes allowed \(--flag\)$"):
        read_file(path, 9, "--flag")
    assert read_prefix(path, 4) == b"0123" and read_prefix(path, 64) == b"0123456789"
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing", 10)
    assert check_model_path(path) and check_model_path(tmp_path)
    assert not check_model_path(tmp_path / "missing") and not check_model_path(path / "below")


def test_a_tree_is_walked_in_order_and_without_recursion(tmp_path: Path) -> None:
    (tmp_path / "b" / "c").mkdir(parents=True)
    for name in ("z", "b/y", "b/c/x", ".hidden"):
        (tmp_path / name).write_text(name)
    assert [(str(e.path.relative_to(tmp_path)), e.kind) for e in walk_tree(tmp_path)] == [
        (".", "folder"), ("z", "file"), ("b", "folder"), ("b/y", "file"), ("b/c", "folder"),
        ("b/c/x", "file")]
    deep = nested_folders(tmp_path / "deep", 1800)
    try:  # far deeper than Python's recursion limit
        assert sum(1 for _ in walk_tree(deep, max_depth=2000)) == 1801
        with pytest.raises(TreeTooLarge, match=r"is nested more than 64 folders deep below"):
            list(walk_tree(deep))
        with pytest.raises(TreeTooLarge, match=r"holds more than 100 files and folders"):
            list(walk_tree(deep, max_depth=2000, max_entries=100))
    finally:
        remove_tree(deep)


def test_a_version_folder_must_hold_regular_files_only(tmp_path: Path) -> None:
    (tmp_path / "1" / "sub").mkdir(parents=True)
    (tmp_path / "1" / "model.onnx").write_bytes(b"x")
    check_model_tree(tmp_path / "1")
    fifo = plant_fifo(tmp_path / "elsewhere" / "weights")
    os.symlink(fifo, tmp_path / "1" / "sub" / ".weights.bin")  # hidden, through a symlink
    try:
        with pytest.raises(NotRegularFile, match=r"'.*/1/sub/\.weights\.bin' is not a regular file \(a FIFO\)"):
            on_a_thread(lambda: check_model_tree(tmp_path / "1"))
    finally:
        release_fifo(fifo)
