"""Remote model repositories (``s3://``, ``gs://``, ``az://``/``abfs://``) through fsspec,
mirrored into a local cache folder that the engine serves like any local repository.

The engine only ever sees local paths: :class:`RemoteRepository` downloads the remote tree
into ``<cache>/<hash of the URL>/`` (:func:`default_cache_root`: ``--model-repository-cache``,
else ``$XDG_CACHE_HOME/workbench/repositories``, else ``~/.cache/workbench/repositories``),
and :meth:`RemoteRepository.sync` brings it up to date: only files whose signature (ETag or
checksum, size, modification time from ``find(detail=True)``) changed are downloaded, each
to a hidden temporary name beside its target then renamed into place (a scan never sees
half a file), and local files that left the remote are removed. The signatures are kept
in a hidden manifest in the cache folder, so a restart downloads only what changed.

URL forms (as tritonserver's):

* ``s3://bucket/path``; ``s3://host:port/bucket/path`` for an S3-compatible endpoint
  (``endpoint_url=http://host:port``); ``AWS_ENDPOINT_URL`` is honoured too.
  Credentials and region: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION`` (botocore's usual chain).
* ``gs://bucket/path`` (gcsfs; ``GOOGLE_APPLICATION_CREDENTIALS``).
* ``az://container/path``, ``abfs://container/path`` (adlfs; ``AZURE_STORAGE_ACCOUNT`` /
  ``AZURE_STORAGE_KEY``, or adlfs' own ``AZURE_STORAGE_*`` variables).

Blocking (network and disk): call it off the event loop.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.common.errors import InvalidArgument
from workbench.repository.repository import ModelRepository

log = logging.getLogger(__name__)

#: URL scheme -> (fsspec protocol, package it needs, the workbench extra that installs it)
SCHEMES: dict[str, tuple[str, str, str]] = {
    "s3": ("s3", "s3fs", "s3"),
    "gs": ("gcs", "gcsfs", "gcs"),
    "gcs": ("gcs", "gcsfs", "gcs"),
    "az": ("az", "adlfs", "azure"),
    "abfs": ("abfs", "adlfs", "azure"),
    "abfss": ("abfs", "adlfs", "azure"),
}

#: the hidden file in a cache folder recording each file's remote signature
MANIFEST = ".workbench-sync.json"
_PARTIAL = ".wb-partial-"
_HOST_PORT = re.compile(r"^[A-Za-z0-9.\-]+:\d+$")


def is_remote(repository: str) -> bool:
    """True when ``repository`` is a URL (``scheme://...``) rather than a local path."""
    return "://" in str(repository)


def default_cache_root() -> Path:
    """Where remote repositories are mirrored when no cache folder is given."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "workbench" / "repositories"


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one :meth:`RemoteRepository.sync` did (relative paths)."""

    downloaded: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class RemoteRepository:
    """One remote model repository and its local mirror.

    Args:
        url: ``s3://...``, ``gs://...``, ``az://...`` or ``abfs://...``.
        cache_root: folder holding the mirrors (one sub-folder per URL).

    Raises:
        InvalidArgument: (at construction) malformed or unsupported URL, or the
            filesystem package for its scheme is not installed ("install workbench[s3]").
    """

    def __init__(self, url: str, cache_root: str | Path | None = None) -> None:
        self.url = url
        scheme, _, rest = url.partition("://")
        scheme = scheme.lower()
        if scheme not in SCHEMES:
            raise InvalidArgument(
                f"unsupported model repository URL '{url}': scheme '{scheme}' is not one of "
                f"{', '.join(s + '://' for s in SCHEMES)}"
            )
        protocol, package, extra = SCHEMES[scheme]
        options: dict[str, Any] = {}
        parts = [p for p in rest.split("/") if p]
        if scheme == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
            if parts and _HOST_PORT.match(parts[0]):  # tritonserver's s3://host:port/bucket/path
                endpoint = f"http://{parts.pop(0)}"
            if endpoint:
                options["endpoint_url"] = endpoint
            region = os.environ.get("AWS_DEFAULT_REGION")
            if region:
                options["client_kwargs"] = {"region_name": region}
        elif package == "adlfs":
            account = os.environ.get("AZURE_STORAGE_ACCOUNT")
            key = os.environ.get("AZURE_STORAGE_KEY")
            if account:
                options["account_name"] = account
            if key:
                options["account_key"] = key
        if not parts:
            raise InvalidArgument(f"invalid model repository URL '{url}': no bucket or container")
        self.root = "/".join(parts)
        if importlib.util.find_spec(package) is None:
            raise InvalidArgument(
                f"model repository '{url}' needs the '{package}' package: "
                f"pip install 'workbench[{extra}]'"
            )
        import fsspec

        self.fs = fsspec.filesystem(protocol, skip_instance_cache=True,
                                    use_listings_cache=False, **options)
        key_text = json.dumps([url, options.get("endpoint_url", "")])
        digest = hashlib.sha256(key_text.encode()).hexdigest()[:16]
        root = Path(cache_root).expanduser() if cache_root else default_cache_root()
        self.local = (root / digest).resolve()
        self._manifest: dict[str, str] = {}
        self._lock = threading.Lock()  # one sync at a time (manifest, stale-file sweep)

    # ------------------------------------------------------------------ public
    def check(self) -> None:
        """Fail unless the remote repository exists and is a folder.

        Raises:
            InvalidArgument: missing bucket or path, or the storage cannot be reached.
        """
        try:
            self.fs.invalidate_cache()
            found = self.fs.isdir(self.root)
        except Exception as exc:  # noqa: BLE001  # fsspec backends raise their own types (credentials, network)
            raise InvalidArgument(f"failed to read model repository '{self.url}': {exc}") from None
        if not found:
            raise InvalidArgument(
                f"model repository '{self.url}' does not exist or is not a directory"
            )

    def model_names(self) -> set[str]:
        """The model folders in the remote repository now (its top-level folders, less the
        hidden ones), listed without downloading anything: what Triton's repository index
        lists for a remote repository.

        Raises:
            InvalidArgument: the remote cannot be listed.
        """
        try:
            self.fs.invalidate_cache()
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return set()
        except Exception as exc:  # noqa: BLE001  # fsspec backends raise their own types (credentials, network)
            raise InvalidArgument(f"failed to read model repository '{self.url}': {exc}") from None
        names = set()
        for info in entries:
            name = str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") == "directory" and name and not name.startswith("."):
                names.add(name)
        return names

    def sync(self, model: str | None = None) -> SyncResult:
        """Bring the mirror (or only ``model``'s folder) up to date with the remote.

        Raises:
            InvalidArgument: the remote cannot be listed (nothing local is changed then).
        """
        prefix = f"{model.strip('/')}/" if model else ""
        if model is not None and (not model or "/" in model.strip("/") or model.startswith(".")):
            raise InvalidArgument(f"invalid model name '{model}'")
        with self._lock:
            return self._sync(model, prefix)

    def _sync(self, model: str | None, prefix: str) -> SyncResult:
        remote = self._list(prefix)
        self.local.mkdir(parents=True, exist_ok=True)
        if not self._manifest:
            self._manifest = self._read_manifest()
        downloaded: list[str] = []
        for relative, signature in sorted(remote.items()):
            target = self.local / relative
            if self._manifest.get(relative) == signature and target.is_file():
                continue
            self._download(relative, target)
            self._manifest[relative] = signature
            downloaded.append(relative)
        removed = self._remove_stale(prefix, remote)
        if downloaded or removed:
            self._write_manifest()
            log.info("synced '%s'%s: %d file(s) downloaded, %d removed", self.url,
                     f" ({model})" if model else "", len(downloaded), len(removed))
        return SyncResult(tuple(downloaded), tuple(removed))

    # ------------------------------------------------------------------ helpers
    def _list(self, prefix: str) -> dict[str, str]:
        """Remote files under ``prefix`` (relative path -> signature)."""
        base = f"{self.root}/{prefix}".rstrip("/")
        try:
            self.fs.invalidate_cache()
            listing = self.fs.find(base, detail=True)
        except FileNotFoundError:
            listing = {}
        except Exception as exc:  # noqa: BLE001  # fsspec backends raise their own types
            raise InvalidArgument(f"failed to read model repository '{self.url}': {exc}") from None
        files: dict[str, str] = {}
        root = self.root.rstrip("/") + "/"
        for name, info in listing.items():
            name = name.split("://", 1)[-1] if "://" in name else name
            if info.get("type") == "directory" or name.endswith("/") or not name.startswith(root):
                continue
            relative = name[len(root):]
            if any(part in ("", ".", "..") for part in relative.split("/")):
                continue  # never write outside the cache folder
            files[relative] = _signature(info)
        return files

    def _download(self, relative: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.parent / f"{_PARTIAL}{uuid.uuid4().hex}-{target.name}"
        try:
            self.fs.get_file(f"{self.root}/{relative}", str(temporary))
            os.replace(temporary, target)
        except Exception as exc:  # noqa: BLE001  # fsspec backends raise their own types
            temporary.unlink(missing_ok=True)
            raise InvalidArgument(
                f"failed to download '{relative}' from model repository '{self.url}': {exc}"
            ) from None

    def _remove_stale(self, prefix: str, remote: dict[str, str]) -> list[str]:
        """Delete local files under ``prefix`` not in ``remote``, then empty folders."""
        top = self.local / prefix if prefix else self.local
        removed: list[str] = []
        if not top.is_dir():
            return removed
        for dirpath, _dirnames, filenames in os.walk(top, topdown=False):
            folder = Path(dirpath)
            for filename in filenames:
                path = folder / filename
                relative = path.relative_to(self.local).as_posix()
                if relative == MANIFEST or relative in remote:
                    continue
                path.unlink(missing_ok=True)
                self._manifest.pop(relative, None)
                if not filename.startswith(_PARTIAL):
                    removed.append(relative)
            if folder != self.local and not any(folder.iterdir()):
                folder.rmdir()
        return removed

    def _read_manifest(self) -> dict[str, str]:
        try:
            data = json.loads((self.local / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("url") != self.url:
            return {}
        files = data.get("files", {})
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}

    def _write_manifest(self) -> None:
        path = self.local / MANIFEST
        temporary = self.local / f"{_PARTIAL}{uuid.uuid4().hex}"
        temporary.write_text(json.dumps({"url": self.url, "files": self._manifest}))
        os.replace(temporary, path)


def _signature(info: dict) -> str:
    """What identifies one version of a remote file: ETag / checksum / generation, size and
    modification time, whichever the filesystem reports."""
    keys = ("ETag", "etag", "md5Hash", "crc32c", "generation", "content_md5", "size",
            "LastModified", "mtime", "updated", "last_modified")
    return json.dumps([str(info.get(k, "")) for k in keys])


def repository_names(repository: ModelRepository, remotes: list[RemoteRepository]) -> set[str]:
    """Blocking: the names of the model folders in the repositories now, as Triton's
    repository index lists them: each local folder scanned, each remote repository listed
    (its mirror only when the remote cannot be read, with a warning), so a model added to
    or removed from a bucket shows at once, before any load or poll syncs it."""
    return set(repository_name_counts(repository, remotes))


def repository_name_counts(repository: ModelRepository, remotes: list[RemoteRepository]) -> dict[str, int]:
    """Blocking: :func:`repository_names`, each with the number of repositories holding a
    model folder of that name (more than 1: a duplicate, which Triton does not serve)."""
    mirrors = {remote.local: remote for remote in remotes}
    counts: dict[str, int] = {}
    for path in repository.paths:
        remote = mirrors.get(path)
        names: set[str] | None = None
        if remote is not None:
            try:
                names = remote.model_names()
            except InvalidArgument as exc:
                log.warning("repository index shows the local mirror: %s", exc.message)
        if names is None:
            names = {name for name, _ in repository.named_folders(path)}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def resolve_repositories(
    repositories: list[str], cache_root: str | Path | None
) -> tuple[list[str | Path], list[RemoteRepository]]:
    """Blocking: the local folders to serve for ``repositories`` (remote ones checked and
    synced into the cache first), and the remote ones. A repository given twice counts
    once (Triton's set of repository paths).

    Raises:
        InvalidArgument: a remote repository is malformed, missing or unreadable.
    """
    paths: list[str | Path] = []
    remotes: list[RemoteRepository] = []
    for repository in dict.fromkeys(repositories):
        if not is_remote(repository):
            paths.append(repository)
            continue
        remote = RemoteRepository(repository, cache_root)
        remote.check()
        remote.sync()
        remotes.append(remote)
        paths.append(remote.local)
    return paths, remotes


__all__ = [
    "MANIFEST", "SCHEMES", "RemoteRepository", "SyncResult", "default_cache_root",
    "is_remote", "repository_name_counts", "repository_names", "resolve_repositories",
]
