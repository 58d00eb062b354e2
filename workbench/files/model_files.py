"""The files of a model repository as the server opens them: regular files only, opened
non-blocking, bounded in size and, for the small files the server parses itself, in time;
folder trees walked without recursion, within bounds. One way for the poll's scans
(:mod:`workbench.repository.snapshot`) and for model loading (config, labels, warmup data,
auto-complete, the files handed to a framework), so a file a scan skips is never opened by a
load either. (A FIFO blocks its reader until a writer comes; a hung mount blocks a read
beyond interruption.)

* A path is ``stat``-ed first (symlinks followed) and anything but a regular file is refused
  (:class:`NotRegularFile`) unopened; the open is ``O_NONBLOCK`` and the descriptor checked
  again (:func:`read_head`).
* Small parsed files are read on a daemon worker thread per calling thread
  (:class:`~workbench.files.bounded_calls.BoundedCalls`), waiting at most :data:`READ_TIMEOUT_S`
  seconds (``TimeoutError``) and refused beyond a size (:class:`FileTooLarge`):
  :func:`read_file`, :func:`read_prefix`.
* Files a framework opens itself are checked first: the model file (:func:`check_model_path`)
  and every file of its version folder (:func:`check_model_tree`).
* Trees: :func:`walk_tree`, at most :data:`MAX_TREE_DEPTH` deep and :data:`MAX_TREE_ENTRIES`
  entries (:class:`TreeTooLarge`).

Every error is an ``OSError``; the texts of :class:`NotRegularFile` and :class:`FileTooLarge`
leave the path to the caller. Beyond Triton (which opens model files as they are): see
docs/security.md, "Every limit, its flag and default"."""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from workbench.files.bounded_calls import BoundedCalls

#: seconds one bounded file read (or folder listing) may take before it counts as unreadable
READ_TIMEOUT_S = 10.0
#: deepest folder nesting a walk enters below the folder it starts from
MAX_TREE_DEPTH = 64
#: most files and folders one walk lists
MAX_TREE_ENTRIES = 100_000
#: the largest label file or Python model source the server reads at load, bytes (Triton
#: classifies at most 1,000,000 classes per output: 64 bytes per label)
MAX_TEXT_FILE_BYTES = 64 << 20
#: the largest model config read by default, bytes (``--model-config-max-size``)
MAX_CONFIG_BYTES = 1 << 20

_local = threading.local()
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


class NotRegularFile(OSError):
    """A FIFO, socket, device or folder where a file is read: never opened."""

    def __init__(self, mode: int, path: Path | None = None) -> None:
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        where = f"'{path}' is " if path is not None else ""
        super().__init__(f"{where}not a regular file ({kind})")


class FileTooLarge(OSError):
    """A file larger than what may be read of it."""


class TreeTooLarge(OSError):
    """A folder tree deeper or larger than a walk enters."""


@dataclass(frozen=True, slots=True)
class FileHead:
    """What :func:`read_head` read: ``data`` (the whole file when ``complete``), the file's
    size (bytes) and modification time (ns) as the open descriptor saw them."""

    data: bytes
    complete: bool
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry of :func:`walk_tree`: ``kind`` is ``"folder"``, ``"file"`` (a regular file,
    a symlink to a folder, or a name that vanished) or ``"special"`` (a FIFO, socket or
    device, symlinks followed: ``mode`` is its ``st_mode``); ``error`` is set on a folder that
    could not be listed."""

    path: Path
    kind: str
    error: OSError | None = None
    mode: int = 0


def read_head(path: Path, limit: int, *, prefix: bool = False) -> FileHead:
    """Blocking, not bounded in time: up to ``limit`` bytes of the regular file ``path``.

    A file larger than ``limit`` is not read (``data`` empty), or with ``prefix`` its first
    ``limit`` bytes are; ``complete`` says whether ``data`` is the whole file.

    Raises:
        NotRegularFile: ``path`` is no regular file (nothing was opened, or the descriptor
            turned out not to be one).
        OSError: missing, unreadable.
    """
    found = os.stat(path)
    if not stat.S_ISREG(found.st_mode):
        raise NotRegularFile(found.st_mode)
    if found.st_size > limit and not prefix:
        return FileHead(b"", False, found.st_size, found.st_mtime_ns)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise NotRegularFile(opened.st_mode)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(limit + 1 - size, max(opened.st_size + 1 - size, 1 << 16)))):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        if size > limit:  # grown since the stat, or a prefix
            return FileHead(data[:limit] if prefix else b"", False, max(size, opened.st_size), opened.st_mtime_ns)
        return FileHead(data, True, size, opened.st_mtime_ns)
    finally:
        os.close(fd)


def read_file(path: Path, limit: int, limit_name: str = "") -> bytes:
    """Blocking, bounded in time (:data:`READ_TIMEOUT_S`): the whole regular file ``path``.

    Args:
        limit: the most bytes it may have.
        limit_name: what sets ``limit`` (a flag), named in the :class:`FileTooLarge` text.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFile: a FIFO, socket, device or folder.
        FileTooLarge: "<n> bytes, more than the <limit> bytes allowed (<limit_name>)".
        TimeoutError: no answer within :data:`READ_TIMEOUT_S` (a hung mount).
        OSError: unreadable.
    """
    head = calls_of_this_thread().call(str(path), read_head, path, limit)
    if not head.complete:
        named = f" ({limit_name})" if limit_name else ""
        raise FileTooLarge(f"{head.size} bytes, more than the {limit} bytes allowed{named}")
    return head.data


def read_prefix(path: Path, size: int) -> bytes:
    """Blocking, bounded in time: the first ``size`` bytes of the regular file ``path`` (all
    of a shorter one). Raises as :func:`read_file` (never :class:`FileTooLarge`)."""
    return calls_of_this_thread().call(str(path), partial(read_head, path, size, prefix=True)).data


def read_model_bytes(path: Path) -> bytes:
    """Blocking, bounded neither in time nor in size (a model file may be gigabytes on slow
    storage): the whole regular file ``path``, opened non-blocking.

    Raises:
        NotRegularFile: a FIFO, socket, device or folder (never opened).
        OSError: missing, unreadable.
    """
    return read_head(path, sys.maxsize).data


def read_text(path: Path, limit: int = MAX_TEXT_FILE_BYTES, limit_name: str = "") -> str:
    """:func:`read_file` decoded as UTF-8, undecodable bytes replaced."""
    return read_file(path, limit, limit_name).decode("utf-8", errors="replace")


def check_model_path(path: Path) -> bool:
    """Bounded in time: whether ``path`` exists as a regular file or a folder (symlinks
    followed, as a framework follows them); False when it does not exist.

    Raises:
        NotRegularFile: a FIFO, socket or device.
        TimeoutError: no answer within :data:`READ_TIMEOUT_S`.
        OSError: it cannot be looked at.
    """
    try:
        mode = calls_of_this_thread().call(str(path), os.stat, path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return True
    raise NotRegularFile(mode)


def check_model_tree(root: Path) -> None:
    """Bounded: every file below the folder ``root`` is a regular file (symlinks followed,
    hidden names too: a framework may open any of them); what a backend's framework opens
    is checked before it is handed the path.

    Raises:
        NotRegularFile: the first that is not, with its path ("'<path>' is not a regular
            file (a FIFO)").
        TreeTooLarge: deeper or larger than a walk enters.
        OSError: a folder could not be listed (``TimeoutError`` for a hung mount).
    """
    for entry in walk_tree(root, hidden=True):
        if entry.error is not None:
            raise entry.error
        if entry.kind == "special":
            raise NotRegularFile(entry.mode, entry.path)


def walk_tree(root: Path, calls: BoundedCalls | None = None, *, hidden: bool = False,
              max_depth: int = MAX_TREE_DEPTH, max_entries: int = MAX_TREE_ENTRIES) -> Iterator[TreeEntry]:
    """The folder ``root`` and everything below it, depth first and in sorted order: each
    folder, then its files, then each of its sub-folders the same way. Iterative (no
    recursion limit); symlinks to folders are not entered (as ``os.walk``); hidden names
    (``.x``) are left out unless ``hidden``. Each listing runs through ``calls`` (default: the
    calling thread's), bounded in time; a folder that cannot be listed is yielded with its
    error and not entered.

    Raises:
        TreeTooLarge: a folder more than ``max_depth`` folders below ``root``, or more than
            ``max_entries`` entries listed ("'<folder>' is nested more than 64 folders deep
            below '<root>'", "'<root>' holds more than 100000 files and folders").
    """
    calls = calls or calls_of_this_thread()
    stack, listed = [(root, 0)], 0
    while stack:
        folder, depth = stack.pop()
        try:
            folders, files = calls.call(str(folder), _list_folder, folder, hidden)
        except OSError as exc:  # vanished, unreadable, or no answer in time
            yield TreeEntry(folder, "folder", exc)
            continue
        yield TreeEntry(folder, "folder")
        listed += len(folders) + len(files)
        if listed > max_entries:
            raise TreeTooLarge(f"'{root}' holds more than {max_entries} files and folders")
        for name, kind, mode in files:
            yield TreeEntry(folder / name, kind, mode=mode)
        if folders and depth >= max_depth:
            raise TreeTooLarge(f"'{folder / folders[0]}' is nested more than {max_depth} folders deep "
                               f"below '{root}'")
        stack.extend((folder / name, depth + 1) for name in reversed(folders))


def calls_of_this_thread() -> BoundedCalls:
    """The calling thread's own :class:`~workbench.files.bounded_calls.BoundedCalls`
    (:data:`READ_TIMEOUT_S`), made on first use."""
    calls: BoundedCalls | None = getattr(_local, "calls", None)
    if calls is None:
        calls = _local.calls = BoundedCalls(READ_TIMEOUT_S)
    return calls


def _list_folder(path: Path, hidden: bool) -> tuple[list[str], list[tuple[str, str, int]]]:
    """(sub-folders, (file, kind, mode) triples) of ``path``, sorted by name (see
    :class:`TreeEntry`)."""
    folders, files = [], []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith(".") and not hidden:
                continue
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                files.append((entry.name, *_kind(entry)))
    return sorted(folders), sorted(files)


def _kind(entry: os.DirEntry[str]) -> tuple[str, int]:
    """``(kind, mode)`` of a listed name that is not a folder (mode 0 but for "special")."""
    if entry.is_file() or entry.is_dir():  # a regular file, or a symlink to one or to a folder
        return "file", 0
    try:
        mode = entry.stat().st_mode
    except OSError:  # vanished, a dangling symlink or a loop: whoever opens it gets the error
        return "file", 0
    return "special", mode


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_TEXT_FILE_BYTES",
    "MAX_TREE_DEPTH",
    "MAX_TREE_ENTRIES",
    "READ_TIMEOUT_S",
    "FileHead",
    "FileTooLarge",
    "NotRegularFile",
    "TreeEntry",
    "TreeTooLarge",
    "calls_of_this_thread",
    "check_model_path",
    "check_model_tree",
    "read_file",
    "read_head",
    "read_model_bytes",
    "read_prefix",
    "read_text",
    "walk_tree",
]
