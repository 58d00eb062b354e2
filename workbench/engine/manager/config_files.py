"""Editing a model's ``config.pbtxt`` on disk through :class:`~workbench.engine.api.server.Server`:
read it, validate a new text as loading would, write it atomically keeping the previous file as
a backup, revert to that backup, and apply the change with a hot reload. The config editor and
the Jupyter extension's config handlers call it; Triton has no such API.

Validation is the loader's own (:func:`~workbench.engine.models.loader.prepare_config`: parse,
auto-complete, normalize, validate; warmup samples; an ensemble's steps against the composing
models loaded now), so a text that validates fails to load only for reasons outside the
config. A write whose reload fails is taken back (the file that served before and its backup
put back, ``kept`` False; the failure stays the model's reason). After every write or revert
the result lists the ensembles that cannot serve now (``dependents``).

Stale and foreign writes: every read is stamped with a version (:func:`config_version`: the
model's name and the sha256 of the file's bytes); a write or revert whose ``expected_version``
is not the file's now raises :class:`~workbench.common.errors.ConfigConflict` and writes nothing. The
check and the write run under one lock.

``ConfigFileService`` reads the repositories through the repository manager, the loaded
configs through its model lifecycle (:class:`~workbench.engine.models.lifecycle.ModelLifecycle`), and
applies a change with ``load_model`` (explicit mode) or a poll (poll mode). User view:
docs/dashboard.md (**Config**) and docs/security.md ("A config write lands only in the file
its text was read from")."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import (
    ConfigConflict,
    InvalidArgument,
    InvalidModelConfig,
    ModelNotFound,
    Unsupported,
    WorkbenchError,
)
from workbench.common.results import ConfigFile, ConfigWriteResult
from workbench.config.model_config import model_config_path
from workbench.config.normalize import is_ensemble
from workbench.config.problems import ConfigProblem, parse_config_text, semantic_problem
from workbench.config.validate_ensemble import check_ensemble_steps, composing_models
from workbench.engine.manager.dependents import dependents
from workbench.engine.manager.repository_manager import RepositoryManager
from workbench.engine.models.loader import prepare_config
from workbench.engine.models.warmup import prepare_warmup
from workbench.files.model_files import read_file
from workbench.startup.options import ServerOptions

#: suffix of the previous config file kept by :meth:`ConfigFileService.write_model_config`
BACKUP_SUFFIX = ".bak"


class ConfigFileService:
    """Read, validate, write, revert and apply a model's config file for the server.

    Args:
        manager: the server's repositories and, through its lifecycle, its models.
        poll: polls the repositories now (poll mode; the server's ``poll_repository``).
    """

    def __init__(self, manager: RepositoryManager, poll: Callable[[], Awaitable[None]]) -> None:
        self.options = manager.options
        self._manager = manager
        self._lifecycle = manager.lifecycle
        self._poll = poll
        #: held from the version check to the end of a write (see the module docstring)
        self._writing = asyncio.Lock()

    async def model_config_file(self, name: str) -> ConfigFile:
        """The config file of model ``name`` as it is on disk now.

        Returns:
            ``{"name", "path", "exists", "text", "backup_exists", "writable", "reason",
            "version"}``: ``path`` is the file loading reads (``<model>/config.pbtxt``, or
            ``<model>/configs/<name>.pbtxt`` under ``--model-config-name`` when it exists);
            ``text`` is "" when it does not exist (the model is auto-completed); ``writable``
            is False, with ``reason``, for a model mirrored from a remote repository (the
            mirror is overwritten at the next sync); ``version`` stamps what was read
            (:func:`config_version`).

        Raises:
            ModelNotFound: ``name`` is not a model folder in the repositories.
            InvalidModelConfig: the file cannot be read (a FIFO, larger than
                ``--model-config-max-size``, no answer in time).
        """
        limit = self.options.model_config_max_size
        return await asyncio.to_thread(lambda: _describe(name, *self._config_location(name), limit))

    async def validate_model_config_text(self, name: str, text: str) -> list[ConfigProblem]:
        """Every problem loading ``text`` as model ``name``'s config would hit ([] = none).

        A syntax error is the only problem when the text does not parse (with protobuf's line
        and column). Otherwise the loader's checks run off the event loop, and the first
        semantic error is returned with the line it is most likely about; for an ensemble,
        its steps are also checked against the composing models' configs when those are
        loaded (a composing model not loaded yet is no problem: loading the ensemble loads
        it).

        Raises:
            ModelNotFound: ``name`` is not a model folder in the repositories.
            InvalidArgument: ``text`` is larger than ``--model-config-max-size`` (1 MiB).
        """
        _check_size(text, self.options.model_config_max_size)
        path, _ = await asyncio.to_thread(self._config_location, name)
        return await self._problems(name, text, path)

    async def _problems(self, name: str, text: str, path: Path) -> list[ConfigProblem]:
        """:meth:`validate_model_config_text` for the config file at ``path``: parsed and
        checked on a worker thread (a 1 MiB text takes seconds to parse: never on the loop)."""
        loaded = {m: e.config for m, e in self._lifecycle.models.items() if e.config is not None}
        return await asyncio.to_thread(_problems_of, name, text, _model_dir(path), self.options, loaded)

    async def write_model_config(self, name: str, text: str, *, reload: bool = True,
                                 expected_version: str | None = None) -> ConfigWriteResult:
        """Validate ``text``, write it as ``name``'s config file and apply it.

        The write is atomic (a temporary file in the same folder, fsynced, renamed over the old one);
        the previous file is kept as ``<file>.bak`` for :meth:`revert_model_config`. With ``reload``:
        ``explicit`` reloads the model (hot, see ``load_model``), ``poll`` polls now, ``none`` applies
        nothing until the next start.

        Args:
            expected_version: the ``version`` of the file ``text`` was based on
                (:meth:`model_config_file`); None: no check (a new text).

        Returns:
            ``{"name", "path", "backup", "restored_from", "version", "reloaded", "reason", "kept",
            "dependents"}``: ``backup`` the backup's path or None; ``restored_from`` None; ``version``
            the file's now; ``reloaded`` True when the model serves the new config, else ``reason``
            says why (mode ``none``; or the load error: the file that served before is put back with
            its backup, ``kept`` False, unless it changed again meanwhile); ``dependents``: each
            ensemble calling the model that cannot serve now, with why.

        Raises (nothing is written):
            InvalidModelConfig: ``text`` has problems (one ``line N: ...`` per line).
            ConfigConflict: ``expected_version`` is not the file's version now.
            ModelNotFound: ``name`` is not a model folder in the repositories.
            Unsupported: the model comes from a remote repository.
            InvalidArgument: ``text`` is larger than ``--model-config-max-size`` (1 MiB)."""
        limit = self.options.model_config_max_size
        _check_size(text, limit)
        path, reason = await asyncio.to_thread(self._config_location, name)
        problems = await self._problems(name, text, path)
        if problems:
            listed = "\n".join(str(p) for p in problems)
            raise InvalidModelConfig(f"model config for '{name}' is not valid:\n{listed}")
        if reason:
            raise Unsupported(f"cannot write the config of '{name}': {reason}")
        async with self._writing:
            await asyncio.to_thread(_check_version, name, path, expected_version, limit)
            before = await asyncio.to_thread(_Before.read, path, limit)
            backup = await asyncio.to_thread(_atomic_write, path, text)
            version = config_version(name, text.encode("utf-8"))
        result: ConfigWriteResult = {
            "name": name, "path": str(path), "backup": str(backup) if backup else None,
            "restored_from": None, "version": version, "reloaded": False, "reason": "",
            "kept": True, "dependents": []}
        result = await self._apply(name, reload, result)
        if reload and not result["reloaded"] and self.options.model_control_mode != "none":
            await self._take_back(name, path, before, result)
        return result

    async def revert_model_config(self, name: str, *, reload: bool = True,
                                  expected_version: str | None = None) -> ConfigWriteResult:
        """Put the backup written by :meth:`write_model_config` back, once, and apply it.

        The backup is moved over the file (atomically): afterwards there is no backup, so a
        second revert has nothing to revert to (it does not re-apply the edit). The backup
        is not re-validated: it is what served before.

        Args:
            expected_version: the ``version`` of the file the caller shows (as for
                :meth:`write_model_config`); None: no check.

        Returns:
            As :meth:`write_model_config`, with ``restored_from`` the backup's path and
            ``backup`` None.

        Raises:
            NotFound (ModelNotFound): no such model, or it has no backup to revert to.
            ConfigConflict: ``expected_version`` is not the file's version now.
            Unsupported: the model comes from a remote repository.
            InvalidModelConfig: the file or its backup cannot be read (as
                :meth:`model_config_file`).
        """
        path, reason = await asyncio.to_thread(self._config_location, name)
        if reason:
            raise Unsupported(f"cannot write the config of '{name}': {reason}")
        backup, limit = path.with_name(path.name + BACKUP_SUFFIX), self.options.model_config_max_size
        async with self._writing:
            await asyncio.to_thread(_check_version, name, path, expected_version, limit)
            try:
                data = await asyncio.to_thread(_restore, backup, path, limit)
            except FileNotFoundError:
                raise ModelNotFound(f"model '{name}' has no config backup to revert to") from None
        result: ConfigWriteResult = {
            "name": name, "path": str(path), "backup": None, "restored_from": str(backup),
            "version": config_version(name, data), "reloaded": False, "reason": "",
            "kept": True, "dependents": []}
        return await self._apply(name, reload, result)

    # ----------------------------------------------------------------- internals
    async def _apply(self, name: str, reload: bool, result: ConfigWriteResult) -> ConfigWriteResult:
        """Apply the file just written as the control mode allows; ``result`` completed."""
        if not reload:
            result["reason"] = "not reloaded (reload=False)"
            return result
        mode = self.options.model_control_mode
        try:
            if mode == "explicit":
                await self._manager.load_model(name)
            elif mode == "poll":
                await self._poll()
            else:
                result["reason"] = ("model control mode 'none' applies config changes at the "
                                    "next start; use 'explicit' or 'poll' to apply them live")
                return result
        except InvalidArgument as exc:
            result["reason"] = exc.message
            return result
        entry = self._lifecycle.entry(name)
        if entry is not None and entry.failed():
            result["reason"] = entry.failure_reason()
        elif entry is not None and entry.load_error:  # a failed reload: the old versions serve
            result["reason"] = f"load failed for model '{name}': {entry.load_error}"
        result["reloaded"] = not result["reason"]
        result["dependents"] = self._unavailable_dependents(name)
        return result

    async def _take_back(self, name: str, path: Path, before: _Before,
                         result: ConfigWriteResult) -> None:
        """The reload of the text just written failed: put the file that served before back,
        with its backup, unless the file changed again since; ``result`` says which."""
        limit = self.options.model_config_max_size
        async with self._writing:
            try:
                await asyncio.to_thread(_check_version, name, path, result["version"], limit)
            except ConfigConflict:
                result["reason"] = f"{_clause(result['reason'])}; {path} changed again since, and was left as it is"
                return
            await asyncio.to_thread(before.restore, path)
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        result["kept"], result["version"] = False, config_version(name, before.file)
        result["backup"] = str(backup) if before.backup is not None else None
        put_back = "the file that served before" if before.file is not None else "no file (as before)"
        result["reason"] = f"{_clause(result['reason'])}; not kept: {path} holds {put_back} again"

    def _unavailable_dependents(self, name: str) -> list[str]:
        """Each ensemble calling ``name`` (directly or through others) that its composing
        models, as loaded now, keep from serving: ``"ensemble 'e' is unavailable: <why>"``."""
        found = []
        for caller in sorted(dependents([name], self._lifecycle.dependencies)):
            entry = self._lifecycle.entry(caller)
            if entry is not None and entry.blocked_versions is not None:
                found.append(f"ensemble '{caller}' is unavailable: {entry.failure_reason()}")
        return found

    def _config_location(self, name: str) -> tuple[Path, str]:
        """Blocking: the config file loading reads for ``name``, and why it may not be
        written ("" when it may)."""
        location = self._manager.repository.locate(name) if "/" not in name and name else None
        if location is None or location.path is None:
            detail = f": {location.error}" if location is not None and location.error else ""
            raise ModelNotFound(f"model '{name}' is not in the model repository{detail}")
        path = model_config_path(location.path, self.options.model_config_name)
        for remote in self._manager.remotes:
            if location.path.is_relative_to(remote.local):
                return path, (f"it is mirrored from the remote repository '{remote.url}'; "
                              "edit it there")
        return path, ""


def _clause(reason: str) -> str:
    """``reason`` without its closing ``;`` (Triton's load errors end with one)."""
    return reason.rstrip("; ")


def _model_dir(config_path: Path) -> Path:
    """The model folder of a config file (``<m>/config.pbtxt`` or ``<m>/configs/x.pbtxt``)."""
    parent = config_path.parent
    return parent.parent if parent.name == "configs" else parent


def _check_size(text: str, limit: int) -> None:
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise InvalidArgument(f"model config text is larger than {limit} bytes")


def _problems_of(name: str, text: str, model_dir: Path, options: ServerOptions,
                 loaded: dict[str, ModelConfig]) -> list[ConfigProblem]:
    """Blocking: the problems of ``text`` as model ``name``'s config (see
    :meth:`ConfigFileService.validate_model_config_text`); ``loaded``: the configs of the
    models loaded now, for an ensemble's steps."""
    config, problems = parse_config_text(text)
    if config is None:
        return problems
    try:
        prepared = _prepare(name, model_dir, options, config)
        if is_ensemble(prepared) and all(m in loaded for m in composing_models(prepared)):
            check_ensemble_steps(prepared, {m: loaded[m] for m in composing_models(prepared)})
    except WorkbenchError as exc:
        return [semantic_problem(text, exc.message)]
    return []


def _prepare(name: str, model_dir: Path, options: ServerOptions, config: ModelConfig) -> ModelConfig:
    """Blocking: the loader's config preparation and warmup checks of ``config`` (raises
    their :class:`WorkbenchError`); the prepared config."""
    prepared = prepare_config(name, model_dir, options, config)
    prepare_warmup(prepared, model_dir)
    return prepared


def config_version(name: str, data: bytes | None) -> str:
    """The version stamp of model ``name``'s config file holding ``data`` (None: no file):
    ``<name>:<sha256 hex of data>`` (``<name>:none``). It names the model, so a text read
    from one model's file is not taken as based on another's, even with the same bytes."""
    return f"{name}:{hashlib.sha256(data).hexdigest() if data is not None else 'none'}"


def _read_bytes(path: Path, limit: int) -> bytes | None:
    """Blocking: the config file's bytes as loading reads them (:mod:`workbench.files.model_files`:
    a regular file only, opened non-blocking, bounded in time, at most ``limit`` bytes), None
    when there is none.

    Raises:
        InvalidModelConfig: it cannot be read ("cannot read the model config '<path>': not a
            regular file (a FIFO)", too large, no answer in time).
    """
    try:
        return read_file(path, limit, "--model-config-max-size")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidModelConfig(f"cannot read the model config '{path}': {exc.strerror or exc}") from None


def _check_version(name: str, path: Path, expected: str | None, limit: int) -> None:
    """Blocking: raise :class:`ConfigConflict` unless ``expected`` (when given) is the
    version of ``name``'s file at ``path`` now (``limit``: as :func:`_read_bytes`)."""
    if expected is None or expected == config_version(name, _read_bytes(path, limit)):
        return
    owner = expected.rpartition(":")[0]
    if owner != name:
        raise ConfigConflict(
            f"not written: the text was read from the config of model '{owner}', not of "
            f"'{name}'; open '{name}' and edit its own file ({path} is unchanged)")
    raise ConfigConflict(
        f"not written: {path} changed since this text was read from it (another tab, "
        "Tuning's Apply best or an editor wrote it); read it again before writing over it "
        "(the file is unchanged)")


def _describe(name: str, path: Path, reason: str, limit: int) -> ConfigFile:
    """Blocking: what :meth:`ConfigFileService.model_config_file` returns."""
    data = _read_bytes(path, limit)
    return {
        "name": name,
        "path": str(path),
        "exists": data is not None,
        # newlines as reading in text mode gives them (\r\n and \r read as \n)
        "text": data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n") if data is not None else "",
        "backup_exists": path.with_name(path.name + BACKUP_SUFFIX).is_file(),
        "writable": not reason,
        "reason": reason,
        "version": config_version(name, data),
    }


def _restore(backup: Path, path: Path, limit: int) -> bytes:
    """Blocking: move ``backup`` over ``path`` (atomic); the restored bytes.

    Raises:
        FileNotFoundError: there is no backup.
        InvalidModelConfig: it cannot be read (as :func:`_read_bytes`).
    """
    data = _read_bytes(backup, limit)
    if data is None:
        raise FileNotFoundError(backup)
    os.replace(backup, path)
    return data


def _atomic_write(path: Path, text: str) -> Path | None:
    """Blocking: replace ``path`` with ``text`` atomically; the old file becomes
    ``<path>.bak``. Returns the backup's path, or None when there was no old file."""
    backup = path.with_name(path.name + BACKUP_SUFFIX) if path.exists() else None
    if backup is not None:
        shutil.copy2(path, backup)
    _replace_with(path, text.encode("utf-8"))
    return backup


def _replace_with(path: Path, data: bytes | None) -> None:
    """Blocking: ``path`` holds ``data`` (a temporary file in the same folder, fsynced, then
    renamed over it), or does not exist (None)."""
    if data is None:
        path.unlink(missing_ok=True)
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


class _Before:
    """A config file and its backup as they were before a write (bytes, None: no file)."""

    def __init__(self, file: bytes | None, backup: bytes | None) -> None:
        self.file, self.backup = file, backup

    @classmethod
    def read(cls, path: Path, limit: int) -> _Before:
        """Blocking: read both (as :func:`_read_bytes`; InvalidModelConfig when one cannot be
        read: nothing is written then)."""
        return cls(_read_bytes(path, limit), _read_bytes(path.with_name(path.name + BACKUP_SUFFIX), limit))

    def restore(self, path: Path) -> None:
        """Blocking: put both back, atomically each."""
        _replace_with(path, self.file)
        _replace_with(path.with_name(path.name + BACKUP_SUFFIX), self.backup)


__all__ = ["BACKUP_SUFFIX", "ConfigFileService", "config_version"]
