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
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.config.versions import scan_version_dirs
from workbench.repository.repository import ModelRepository

#: files up to this many bytes are digested by content, larger ones by size and mtime
CONTENT_HASH_LIMIT = 1 << 20


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


def snapshot_repository(repository: ModelRepository) -> dict[str, ModelSnapshot]:
    """Every model folder now in ``repository``, by name, with its digests.

    A folder that vanishes or cannot be read while it is scanned gets the digests of
    what could be read (the next scan sees it settled).
    """
    snapshots = {}
    for name, location in repository.scan().items():
        if location.error or location.path is None:
            snapshots[name] = ModelSnapshot(location.path, location.error or "unreadable")
            continue
        snapshots[name] = snapshot_model(location.path)
    return snapshots


def snapshot_model(model_dir: Path) -> ModelSnapshot:
    """Digests of one model folder (see the module docstring)."""
    versions = scan_version_dirs(model_dir, warn=False)
    version_names = {path.name for path in versions.values()}
    model_hash = hashlib.blake2b(digest_size=16)
    try:
        children = sorted(model_dir.iterdir())
    except OSError:
        children = []
    for child in children:
        if not child.name.startswith(".") and child.name not in version_names:
            _digest_tree(child, model_dir, model_hash)
    return ModelSnapshot(
        model_dir,
        model_digest=model_hash.hexdigest(),
        versions={v: _tree_digest(path) for v, path in versions.items()},
    )


def _tree_digest(root: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    _digest_tree(root, root, digest)
    return digest.hexdigest()


def _digest_tree(path: Path, base: Path, digest: "hashlib._Hash") -> None:
    """Add ``path`` (a file, or a folder walked in sorted order) to ``digest``."""
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            folder = Path(dirpath)
            digest.update(b"D" + str(folder.relative_to(base)).encode() + b"\0")
            for filename in sorted(filenames):
                if not filename.startswith("."):
                    _digest_file(folder / filename, base, digest)
        return
    _digest_file(path, base, digest)


def _digest_file(path: Path, base: Path, digest: "hashlib._Hash") -> None:
    digest.update(b"F" + str(path.relative_to(base)).encode() + b"\0")
    try:
        stat = path.stat()
        if stat.st_size <= CONTENT_HASH_LIMIT:
            digest.update(path.read_bytes())
        else:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    except OSError:  # vanished or unreadable while scanned
        digest.update(b"?")


__all__ = ["CONTENT_HASH_LIMIT", "ModelSnapshot", "snapshot_model", "snapshot_repository"]
