"""What a model repository holds at one moment, reduced to digests: how ``poll`` mode sees what
changed between two scans (Triton's ``ModelRepositoryManager::Poll`` compares modification
times; here contents where that is cheap). Blocking: call it off the event loop.

Per model folder: ``model_digest`` (every file outside the numbered version folders:
``config.pbtxt``, labels, ``configs/``, ``warmup/``, ...; a change reloads every version) and
``versions`` (one digest per numbered version folder, recursively; a change reloads that
version, a folder appearing or gone is a version added or removed). A file up to
:data:`CONTENT_HASH_LIMIT` bytes is digested by content (``touch`` changes nothing), a larger
one by (size, mtime in ns). Hidden names (``.foo``) are ignored.

Files are read as loading reads them (:mod:`workbench.files.model_files`): non-regular files are
skipped with a warning (once per path), every read and listing is bounded
(:data:`~workbench.files.model_files.READ_TIMEOUT_S`; one that does not answer is digested as
unreadable, with a warning), trees are walked without recursion within
:data:`~workbench.files.model_files.MAX_TREE_DEPTH` / :data:`~workbench.files.model_files.MAX_TREE_ENTRIES`;
a model folder that fails to scan gets the reason as its snapshot's ``error``, never failing
the others. User view: docs/model-control.md (``poll``)."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from workbench.config.versions import scan_version_dirs
from workbench.files.bounded_calls import BoundedCalls
from workbench.files.model_files import NotRegularFile, calls_of_this_thread, read_head, walk_tree
from workbench.repository.repository import ModelRepository

log = logging.getLogger(__name__)


class _Digest(Protocol):
    """What the tree digest needs of a ``hashlib`` hash object (typeshed's ``hashlib._Hash``)."""

    def update(self, data: bytes, /) -> None: ...

#: files up to this many bytes are digested by content, larger ones by size and mtime
CONTENT_HASH_LIMIT = 1 << 20
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
    what could be read (the next scan sees it settled); one that cannot be scanned at all (a
    tree too deep or too large to walk) gets the reason as its ``error``. ``calls`` bounds each
    file read and folder listing (default: the calling thread's,
    :func:`~workbench.files.model_files.calls_of_this_thread`).
    """
    snapshots = {}
    for name, location in repository.scan().items():
        if location.error or location.path is None:
            snapshots[name] = ModelSnapshot(location.path, location.error or "unreadable")
            continue
        try:
            snapshots[name] = snapshot_model(location.path, calls)
        except Exception as exc:  # noqa: BLE001  # that model's state; the scan goes on with the others
            log.warning("poll: cannot scan the model folder '%s': %s", location.path, exc)
            snapshots[name] = ModelSnapshot(location.path, f"cannot scan the model folder: {exc}")
    return snapshots


def snapshot_model(model_dir: Path, calls: BoundedCalls | None = None) -> ModelSnapshot:
    """Digests of one model folder (see the module docstring).

    Raises:
        TreeTooLarge: a folder of it is nested too deep or holds too many entries.
    """
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
    compares the version folder's and the non-config files' modification times).

    Raises:
        TreeTooLarge: as :func:`snapshot_model`.
    """
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


def _tree_digest(root: Path, calls: BoundedCalls | None) -> str:
    digest = hashlib.blake2b(digest_size=16)
    _digest_tree(root, root, digest, calls)
    return digest.hexdigest()


def _digest_tree(path: Path, base: Path, digest: _Digest, calls: BoundedCalls | None) -> None:
    """Add ``path`` (a file, or a folder walked in sorted order) to ``digest``. Symlinks to
    folders below ``path`` are not followed (as ``os.walk`` does not)."""
    if not path.is_dir():
        _digest_file(path, base, digest, calls)
        return
    for entry in walk_tree(path, calls):
        if entry.kind != "folder":
            _digest_file(entry.path, base, digest, calls)
            continue
        digest.update(b"D" + str(entry.path.relative_to(base)).encode() + b"\0")
        if isinstance(entry.error, TimeoutError):
            _warn_once(str(entry.path), f"poll: skipping the folder '{entry.path}': {entry.error} (hung mount?)")
        if entry.error is not None:  # vanished, unreadable or hung while scanned
            digest.update(b"?")


def _digest_file(path: Path, base: Path, digest: _Digest, calls: BoundedCalls | None) -> None:
    try:
        content = (calls or calls_of_this_thread()).call(str(path), _read_for_digest, path)
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
    its size and mtime; None for anything but a regular file (never opened: a FIFO blocks;
    :func:`~workbench.files.model_files.read_head`)."""
    try:
        head = read_head(path, CONTENT_HASH_LIMIT)
    except NotRegularFile:
        return None
    return head.data if head.complete else f"{head.size}:{head.mtime_ns}".encode()


def _warn_once(path: str, message: str) -> None:
    with _warned_lock:
        if path in _warned:
            return
        _warned.add(path)
    log.warning("%s", message)


__all__ = ["CONTENT_HASH_LIMIT", "ModelSnapshot", "snapshot_model", "snapshot_repository",
           "version_fingerprint"]
