"""Model file overrides of the load API: a temporary model folder made from ``file:`` parameters.

Follows Triton's repository extension and core's ``LocalizeRepoAgent``: a load request
whose parameters hold ``file:<version>/<name>`` entries (file contents; base64 strings
over HTTP, ``bytes_param`` over gRPC) together with a ``config`` JSON override loads the
model from a fresh temporary folder holding exactly those files plus a ``config.pbtxt``
written from the override. Nothing else is used, not even the repository's folder of the
same name, and the repository on disk is never written. The folder lives as long as the
loaded model: it is removed when the model is unloaded or reloaded, and at server stop.

Paths are checked before anything is written; each rule raises :class:`InvalidArgument`
naming the parameter (``file:<path>``):

- not empty; no backslash, NUL, empty component (``1//x``, ``1/``), ``.`` or ``..``;
  components of at most 255 bytes (the file system's limit; a longer one raises
  :class:`~workbench.common.errors.InternalError`, as Triton answers it INTERNAL / HTTP 500);
- a single leading ``/`` is read as the model folder's root, as Triton joins it
  (``file:/1/model.py`` == ``file:1/model.py``); nothing else can be absolute;
- the first component is a version folder (``1``, ``2``, ...: a non-negative integer
  without leading zeros), one of Triton's model subfolders ``warmup`` (warmup input files),
  ``initial_state`` or ``configs``; or the path is a single name at the model's root (a
  ``label_filename`` file). So ``file:/etc/passwd`` is refused;
- no two parameters name the same file, and no file is also a folder of another.

Files are written through directory file descriptors with ``O_NOFOLLOW`` and
``O_CREAT | O_EXCL``: a path that would pass through a symlink, or overwrite anything,
fails instead of writing outside the folder (Triton checks that the resolved path stays
inside the model directory).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InternalError, InvalidArgument
from workbench.config.model_config import CONFIG_FILENAME
from workbench.config.versions import NON_VERSION_FOLDERS

log = logging.getLogger(__name__)

#: the load parameter prefix of a model file override (Triton's ``file_prefix``).
FILE_PREFIX = "file:"
#: longest path component most file systems accept (NAME_MAX).
_NAME_MAX = 255
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def override_path(path: str) -> tuple[str, ...]:
    """The components of one override file path (the load parameter name minus ``file:``).

    Returns:
        The path's components, e.g. ``("1", "model.onnx")`` for ``"1/model.onnx"`` or
        ``"/1/model.onnx"``.

    Raises:
        InvalidArgument: the path breaks a rule of this module's docstring; the message
            starts "Invalid file parameter 'file:<path>': ".
        InternalError: a component longer than 255 bytes (same message start).
    """

    def fail(why: str) -> InvalidArgument:
        return InvalidArgument(f"Invalid file parameter '{FILE_PREFIX}{path}': {why}")

    if not path or path == "/":
        raise fail("the file name is empty")
    if "\\" in path or "\0" in path:
        raise fail("backslashes and NUL characters are not allowed in a model file path")
    relative = path[1:] if path.startswith("/") else path
    parts = tuple(relative.split("/"))
    if any(part == "" for part in parts):
        raise fail("empty path components ('//', a leading '//' or a trailing '/') are not allowed")
    if any(part in (".", "..") for part in parts):
        raise fail("'.' and '..' are not allowed in a model file path: it must stay within "
                   "the model directory")
    if any(len(part.encode("utf-8", "surrogatepass")) > _NAME_MAX for part in parts):
        # Triton's file-system error (its clients check INTERNAL here), not INVALID_ARG
        raise InternalError(f"Invalid file parameter '{FILE_PREFIX}{path}': a path component is "
                            f"longer than {_NAME_MAX} bytes")
    if len(parts) > 1 and not (_is_version(parts[0]) or parts[0] in NON_VERSION_FOLDERS):
        raise fail("a model file must be in a version folder ('file:<version>/<name>'), in "
                   "one of " + ", ".join(f"'{f}/'" for f in sorted(NON_VERSION_FOLDERS))
                   + ", or directly in the model folder")
    return parts


def check_override_files(files: Mapping[str, bytes]) -> dict[tuple[str, ...], bytes]:
    """Check every path of ``files`` (path -> contents) and the set as a whole.

    Returns:
        ``{components: contents}``.

    Raises:
        InvalidArgument: a path is invalid (:func:`override_path`), two paths name the same
            file, a file is also another file's folder, or contents are not bytes.
    """
    checked: dict[tuple[str, ...], bytes] = {}
    for path, contents in files.items():
        parts = override_path(path)
        if not isinstance(contents, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"File parameter '{FILE_PREFIX}{path}' must have bytes type "
                                  "for its value")
        if parts in checked:
            raise InvalidArgument(f"Invalid file parameter '{FILE_PREFIX}{path}': the file "
                                  f"'{'/'.join(parts)}' is given twice")
        checked[parts] = bytes(contents)
    folders = {parts[:i] for parts in checked for i in range(1, len(parts))}
    for parts in checked:
        if parts in folders:
            raise InvalidArgument(f"Invalid file parameter '{FILE_PREFIX}{'/'.join(parts)}': "
                                  "it is also the folder of another file parameter")
    return checked


def write_override_files(root: Path, files: Mapping[tuple[str, ...], bytes]) -> None:
    """Write ``files`` (checked components -> contents) under the existing folder ``root``.

    Blocking. Each folder is opened relative to its parent's descriptor with ``O_NOFOLLOW``
    and each file created with ``O_CREAT | O_EXCL | O_NOFOLLOW``.

    Raises:
        InvalidArgument: a folder on the way is a symlink or not a folder, or the file
            exists already (what a symlink planted in ``root`` would cause).
    """
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        for parts, contents in files.items():
            _write_one(root_fd, parts, contents)
    finally:
        os.close(root_fd)


def _write_one(root_fd: int, parts: tuple[str, ...], contents: bytes) -> None:
    name = FILE_PREFIX + "/".join(parts)
    fds = [root_fd]
    try:
        for folder in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o755, dir_fd=fds[-1])
            try:
                fds.append(os.open(folder, _DIR_FLAGS, dir_fd=fds[-1]))
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise InvalidArgument(
                        f"Invalid file parameter '{name}': '{folder}' is a symlink or not a "
                        "folder; the file must stay within the model directory"
                    ) from None
                raise
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, 0o644, dir_fd=fds[-1])
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ELOOP, errno.EISDIR):
                raise InvalidArgument(
                    f"Invalid file parameter '{name}': the path exists already (a symlink or a "
                    "folder); the file must stay within the model directory"
                ) from None
            raise
        with os.fdopen(fd, "wb") as out:
            out.write(contents)
    finally:
        for fd in fds[1:]:
            os.close(fd)


class OverrideDirectory:
    """One temporary model folder made from a load request's files. ``remove()`` is
    idempotent and thread-safe.

    Attributes:
        name: the model's name.
        path: the folder (``config.pbtxt`` and the override files).
    """

    def __init__(self, name: str, path: Path, store: OverrideStore) -> None:
        self.name = name
        self.path = path
        self._store = store

    def remove(self) -> None:
        """Delete the folder and everything in it (no error if it is gone already)."""
        self._store.discard(self)

    def __repr__(self) -> str:
        return f"OverrideDirectory({self.name!r}, {str(self.path)!r})"


class OverrideStore:
    """The temporary model folders of one server, all under one private root folder
    (created on first use with mode 0700, removed by :meth:`close`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: Path | None = None
        self._live: dict[Path, OverrideDirectory] = {}

    @property
    def root(self) -> Path | None:
        """The root folder, None before the first override or after :meth:`close`."""
        return self._root

    def live(self) -> list[OverrideDirectory]:
        """The folders made and not removed yet."""
        with self._lock:
            return list(self._live.values())

    def create(self, name: str, config: ModelConfig, files: Mapping[str, bytes]) -> OverrideDirectory:
        """Make the folder for model ``name``: ``files`` (paths relative to the model folder
        -> contents) plus ``config.pbtxt`` written from ``config`` (so a file parameter
        ``config.pbtxt`` never replaces the override). Blocking.

        Raises:
            InvalidArgument: see :func:`check_override_files` and
                :func:`write_override_files`; nothing is left on disk then.
        """
        checked = check_override_files(files)
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="workbench-overrides-"))
            root = self._root
        path = Path(tempfile.mkdtemp(prefix="model-", dir=root))
        directory = OverrideDirectory(name, path, self)
        with self._lock:
            self._live[path] = directory
        try:
            write_override_files(path, {p: c for p, c in checked.items() if p != (CONFIG_FILENAME,)})
            (path / CONFIG_FILENAME).write_text(text_format.MessageToString(config))
        except BaseException:
            directory.remove()
            raise
        log.info("model '%s': loading from the override files %s in '%s'", name,
                 sorted("/".join(p) for p in checked), path)
        return directory

    def discard(self, directory: OverrideDirectory) -> None:
        """Remove ``directory``'s folder (what :meth:`OverrideDirectory.remove` calls)."""
        with self._lock:
            known = self._live.pop(directory.path, None)
        if known is not None:
            shutil.rmtree(directory.path, ignore_errors=True)

    def close(self) -> None:
        """Remove every folder and the root (server stop). Safe to call twice."""
        with self._lock:
            root, self._root = self._root, None
            self._live.clear()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _is_version(name: str) -> bool:
    return name.isdigit() and name.isascii() and (name == "0" or not name.startswith("0"))


__all__ = [
    "FILE_PREFIX",
    "OverrideDirectory",
    "OverrideStore",
    "check_override_files",
    "override_path",
    "write_override_files",
]
