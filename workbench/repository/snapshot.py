"""What a model repository holds at one moment, reduced to digests: how ``poll`` mode sees
what changed between two scans (Triton's ``ModelRepositoryManager::Poll``, which compares
modification times; here file contents are compared where that is cheap).

Blocking (file system reads): call it off the event loop.

Per model folder, two kinds of digest:

* ``model_digest``: every file of the model folder outside its numbered version folders
  (``config.pbtxt``, label files, ``configs/``, ``warmup/``, any other folder). A change here is a
  change of the model as a whole: every version reloads.
* ``versions``: one digest per numbered version folder (its files, recursively). A change
  in one of them reloads only that version; a folder that appears or disappears is a
  version added or removed (the version policy then decides what is served).

A file up to :data:`CONTENT_HASH_LIMIT` bytes is digested by content (rewriting a config
with the same text, or ``touch``, changes nothing); a larger one by (size, mtime in ns)
so that big model files are never read on every poll. Hidden names (``.foo``: editor swap
files, ``.ipynb_checkpoints``, a temporary file about to be renamed into place) are
ignored, as the repository scan ignores hidden model folders.

Files that are not regular files (a FIFO, socket or device, even through a symlink) are
never opened, and skipped with a warning (once per path): reading a FIFO blocks forever.
Every file read and folder listing runs through :class:`~workbench.repository.bounded.BoundedCalls`
(:data:`READ_TIMEOUT_S` each): one that does not answer (a hung mount) is digested as
unreadable, with a warning, and the scan goes on with the other files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from workbench.config.versions import scan_version_dirs
from workbench.repository.bounded import BoundedCalls
from workbench.repository.repository import ModelRepository

log = logging.getLogger(__name__)


class _Digest(Protocol):
    """What the tree digest needs of a ``hashlib`` hash object (typeshed's ``hashlib._Hash``)."""

    def update(self, data: bytes, /) -> None: ...

#: files up to this many bytes are digested by content, larger ones by size and mtime
CONTENT_HASH_LIMIT = 1 << 20
#: seconds one file read (or folder listing) of a scan may take before it counts as unreadable
READ_TIMEOUT_S = 10.0
#: the bounded calls of scans that are given none
_CALLS = BoundedCalls(READ_TIMEOUT_S)
_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """One model folder as found by a scan.

    Attributes:
        path: the folder (None when the name is ambiguous across repositories).
        error: why the model cannot be served as found ("" when it can).
        model_digest: digest of the files outside the version folders.
        versions: version number -> digest of that version folder's files.
    """

    path: Path | None
    error: str = ""
    model_digest: str = ""
    versions: Mapping[int, str] = field(default_factory=dict)


def snapshot_repository(repository: ModelRepository,
                        calls: BoundedCalls | None = None) -> dict[str, ModelSnapshot]:
    """Every model folder now in ``repository``, by name, with its digests.

    A folder that vanishes or cannot be read while it is scanned gets the digests of
    what could be read (the next scan sees it settled). ``calls`` bounds each file read
    and folder listing (default: a shared one with :data:`READ_TIMEOUT_S`).
    """
    calls = calls or _CALLS
    snapshots = {}
    for name, location in repository.scan().items():
        if location.error or location.path is None:
            snapshots[name] = ModelSnapshot(location.path, location.error or "unreadable")
            continue
        snapshots[name] = snapshot_model(location.path, calls)
    return snapshots


def snapshot_model(model_dir: Path, calls: BoundedCalls | None = None) -> ModelSnapshot:
    """Digests of one model folder (see the module docstring)."""
    calls = calls or _CALLS
    versions = scan_version_dirs(model_dir, warn=False)
    version_names = {path.name for path in versions.values()}
    model_hash = hashlib.blake2b(digest_size=16)
    try:
        children = sorted(model_dir.iterdir())
    except OSError:
        children = []
    for child in children:
        if not child.name.startswith(".") and child.name not in version_names:
            _digest_tree(child, model_dir, model_hash, calls)
    return ModelSnapshot(
        model_dir,
        model_digest=model_hash.hexdigest(),
        versions={v: _tree_digest(path, calls) for v, path in versions.items()},
    )


def version_fingerprint(model_dir: Path, version_dir: Path, calls: BoundedCalls | None = None) -> str:
    """Digest of what one version loads besides its config: the files of ``version_dir`` and
    those of ``model_dir`` outside its version folders and ``config.pbtxt`` (labels,
    ``configs/``, warmup files), digested as a snapshot digests them. Equal before and after a
    reload: the version's files did not change (Triton's ``IsModelVersionModified``, which
    compares the version folder's and the non-config files' modification times)."""
    calls = calls or _CALLS
    digest = hashlib.blake2b(digest_size=16)
    digest.update(_tree_digest(version_dir, calls).encode() + b"\0")
    version_names = {path.name for path in scan_version_dirs(model_dir, warn=False).values()}
    try:
        children = sorted(model_dir.iterdir())
    except OSError:
        children = []
    for child in children:
        if not child.name.startswith(".") and child.name not in version_names | {"config.pbtxt"}:
            _digest_tree(child, model_dir, digest, calls)
    return digest.hexdigest()


def _tree_digest(root: Path, calls: BoundedCalls) -> str:
    digest = hashlib.blake2b(digest_size=16)
    _digest_tree(root, root, digest, calls)
    return digest.hexdigest()


def _digest_tree(path: Path, base: Path, digest: _Digest, calls: BoundedCalls) -> None:
    """Add ``path`` (a file, or a folder walked in sorted order) to ``digest``. Symlinks to
    folders below ``path`` are not followed (as ``os.walk`` does not)."""
    if not path.is_dir():
        _digest_file(path, base, digest, calls)
        return
    digest.update(b"D" + str(path.relative_to(base)).encode() + b"\0")
    try:
        folders, files = calls.call(str(path), _list_folder, path)
    except TimeoutError as exc:
        _warn_once(str(path), f"poll: skipping the folder '{path}': {exc} (hung mount?)")
        digest.update(b"?")
        return
    except OSError:  # vanished or unreadable while scanned
        digest.update(b"?")
        return
    for name in files:
        _digest_file(path / name, base, digest, calls)
    for name in folders:
        _digest_tree(path / name, base, digest, calls)


def _list_folder(path: Path) -> tuple[list[str], list[str]]:
    """(sub-folders, files) of ``path``, sorted; hidden names and symlinks to folders are
    left out, "files" are all other entries (FIFOs too: :func:`_read_for_digest` sorts them)."""
    folders, files = [], []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            elif not entry.is_dir():
                files.append(entry.name)
    return sorted(folders), sorted(files)


def _digest_file(path: Path, base: Path, digest: _Digest, calls: BoundedCalls) -> None:
    try:
        content = calls.call(str(path), _read_for_digest, path)
    except TimeoutError as exc:
        _warn_once(str(path), f"poll: cannot read '{path}': {exc} (hung mount?); it counts as "
                   "unreadable until it answers")
        content = b"?"
    except OSError:  # vanished or unreadable while scanned
        content = b"?"
    if content is None:
        _warn_once(str(path), f"poll: skipping '{path}': not a regular file (a FIFO, socket or "
                   "device in a model folder is never read)")
        return
    digest.update(b"F" + str(path.relative_to(base)).encode() + b"\0")
    digest.update(content)


def _read_for_digest(path: Path) -> bytes | None:
    """What a file adds to a digest: its content up to :data:`CONTENT_HASH_LIMIT` bytes, else
    its size and mtime; None for anything but a regular file (never opened: a FIFO blocks).
    Opened non-blocking and checked again on the descriptor, so a file swapped for a FIFO
    between the two looks cannot block either."""
    found = path.stat()
    if not stat.S_ISREG(found.st_mode):
        return None
    if found.st_size > CONTENT_HASH_LIMIT:
        return f"{found.st_size}:{found.st_mtime_ns}".encode()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return None
        chunks, size = [], 0
        while size <= CONTENT_HASH_LIMIT and (chunk := os.read(fd, CONTENT_HASH_LIMIT + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        if size > CONTENT_HASH_LIMIT:  # grew since the stat
            return f"{opened.st_size}:{opened.st_mtime_ns}".encode()
        return b"".join(chunks)
    finally:
        os.close(fd)


def _warn_once(path: str, message: str) -> None:
    with _warned_lock:
        if path in _warned:
            return
        _warned.add(path)
    log.warning("%s", message)


__all__ = ["CONTENT_HASH_LIMIT", "READ_TIMEOUT_S", "ModelSnapshot", "snapshot_model", "snapshot_repository",
           "version_fingerprint"]
