"""Numbered version folders and the version policy.

Follows Triton's ``VersionsToLoad`` (core ``model_lifecycle.cc``): every
subfolder of a model directory whose name is a non-negative integer is a
version; ``warmup``, ``initial_state`` and ``configs`` are skipped; names with
leading zeros or that are not integers are ignored with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig
from workbench.files.model_files import check_model_path

logger = logging.getLogger(__name__)

#: model subfolders that are never versions (Triton's ``skip_dirs``).
NON_VERSION_FOLDERS = frozenset({"warmup", "initial_state", "configs"})

_INT64_MAX = 2**63 - 1


def scan_version_dirs(model_dir: Path, *, warn: bool = True) -> dict[int, Path]:
    """Find a model's version folders.

    Follows Triton: a version folder is named by a non-negative integer
    (``0`` included); ``"003"`` is ignored with the warning "ignore version
    directory '003' which contains leading zeros in its directory name" and
    ``"abc"`` with "... which fails to convert to integral number". Unlike
    Triton, hidden folders (``.ipynb_checkpoints``, ``.git``) are skipped
    silently, and ``"1abc"`` / ``"-1"`` are ignored rather than read as 1 / -1.

    Args:
        model_dir: the model's directory; a missing directory has no versions.
        warn: log the ignored names (False for repeated internal scans).

    Returns:
        ``{version: path}`` sorted by ascending version.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return {}
    versions: dict[int, Path] = {}
    for entry in model_dir.iterdir():
        name = entry.name
        if not entry.is_dir() or name in NON_VERSION_FOLDERS or name.startswith("."):
            continue
        version = _parse_version(name, warn=warn)
        if version is not None:
            versions[version] = entry
    return dict(sorted(versions.items()))


def select_versions(config: ModelConfig, available: Iterable[int]) -> list[int]:
    """Apply the config's version policy to the versions present on disk.

    Follows Triton: ``latest { num_versions: N }`` keeps the N highest (no
    policy = latest 1); ``all {}`` keeps every version; ``specific { versions }``
    keeps the listed versions that exist and logs an error for each listed one
    that does not ("version 3 is specified for model 'm', but the version
    directory is not present").

    Args:
        config: the model config (only ``version_policy`` and ``name`` are read).
        available: version numbers found on disk.

    Returns:
        The versions to serve, ascending, without duplicates; may be empty.
    """
    present = sorted(set(available))
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice") if config.HasField("version_policy") else None
    if choice == "all":
        return present
    if choice == "specific":
        return _select_specific(config.name, policy.specific.versions, present)
    count = policy.latest.num_versions if choice == "latest" else 1
    return present[-count:] if count > 0 else []


def find_model_file(config: ModelConfig, model_dir: Path) -> Path | None:
    """The model file a backend's auto-complete reads (``default_model_filename``).

    The newest version the version policy serves that holds the file (the one
    clients reach by default). None when the model has no version folder at all
    (loading then fails with Triton's "no version is available"). The file must be a
    regular file or a folder (:func:`workbench.files.model_files.check_model_path`): the callers
    read it.

    Raises:
        InvalidModelConfig: versions exist but none of them holds the file, or it is a FIFO,
            socket or device, or does not answer in time.
    """
    versions = scan_version_dirs(model_dir, warn=False)
    if not versions:
        return None
    selected = select_versions(config, versions) or sorted(versions)
    for version in reversed(selected):
        path = versions[version] / str(config.default_model_filename)
        try:
            if check_model_path(path):
                return path
        except OSError as exc:  # a FIFO, socket or device: never handed to a reader
            raise InvalidModelConfig(
                f"autofill failed for model '{config.name}': cannot read '{path}': {exc.strerror or exc}"
            ) from None
    raise InvalidModelConfig(
        f"autofill failed for model '{config.name}': unable to find "
        f"'{config.default_model_filename}' in any version directory of '{model_dir}'"
    )


def _select_specific(model: str, wanted: Iterable[int], present: list[int]) -> list[int]:
    """Keep the wanted versions that exist; log the missing ones as Triton does."""
    existing = set(present)
    selected = set()
    for version in wanted:
        if version in existing:
            selected.add(version)
        else:
            logger.error(
                "version %d is specified for model '%s', but the version directory is not present",
                version,
                model,
            )
    return sorted(selected)


def _parse_version(name: str, *, warn: bool) -> int | None:
    """Folder name -> version number, or None (with Triton's warning) if it is not one."""
    if name.isascii() and name.isdigit() and int(name) <= _INT64_MAX:
        if len(name) > 1 and name.startswith("0"):
            reason = "contains leading zeros in its directory name"
        else:
            return int(name)
    else:
        reason = "fails to convert to integral number"
    if warn:
        logger.warning("ignore version directory '%s' which %s", name, reason)
    return None


__all__ = ["NON_VERSION_FOLDERS", "find_model_file", "scan_version_dirs", "select_versions"]
