"""Model repository scan: ``<repository>/<model>/[config.pbtxt, <version>/...]``.

Follows Triton's model repository layout: every sub-folder of a repository is a
model named after the folder; several repositories may be given, and a model
name found in two of them is an error for that model (it is not served).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from workbench.common.errors import AlreadyExists, InvalidArgument

log = logging.getLogger(__name__)

#: the repository index's reason for a name found in two or more repositories (Triton's
#: ``MODEL_READY_REASON_DUPLICATE``)
DUPLICATE_REASON = "model appears in two or more repositories"


@dataclass(frozen=True, slots=True)
class ModelLocation:
    """Where a model lives; ``error`` is set when it cannot be served as found."""

    name: str
    path: Path | None
    error: str = ""


class ModelRepository:
    """The union of one or more local model repository folders.

    A folder named more than once (also spelled differently: ``m``, ``m/``, a symlink to
    it) is one repository, as Triton keeps its repository paths in a set.

    Raises:
        InvalidArgument: (at construction) a repository path is missing or not a folder.
    """

    def __init__(self, paths: list[str | Path]) -> None:
        self.paths = list(dict.fromkeys(Path(p).expanduser().resolve() for p in paths))
        for path in self.paths:
            if not path.is_dir():
                raise InvalidArgument(
                    f"model repository '{path}' does not exist or is not a directory"
                )
        #: model name -> (registered repository, the sub-folder served under that name)
        self.mappings: dict[str, tuple[Path, Path]] = {}

    def register(self, path: str | Path, name_mapping: dict[str, str]) -> None:
        """Add the repository ``path`` (Triton's ``TRITONSERVER_ServerRegisterModelRepository``);
        ``name_mapping``: a sub-folder -> the model name it is served under (that folder is
        then served under that name only).

        Raises:
            InvalidArgument: ``path`` is not a folder ("failed to register '<path>', repository
                not found").
            AlreadyExists: ``path`` is registered already, or a mapped name is taken
                (Triton's texts).
        """
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_dir():
            raise InvalidArgument(f"failed to register '{path}', repository not found")
        if resolved in self.paths:
            raise AlreadyExists(f"model repository '{path}' has already been registered")
        for name in name_mapping.values():
            if name in self.mappings:
                raise AlreadyExists(f"failed to register '{name}', there is a conflicting mapping for '{name}'")
        self.paths.append(resolved)
        for folder, name in name_mapping.items():
            self.mappings[name] = (resolved, resolved / folder)

    def unregister(self, path: str | Path) -> None:
        """Remove the repository ``path`` and its name mappings (Triton's
        ``TRITONSERVER_ServerUnregisterModelRepository``); loaded models stay loaded.

        Raises:
            InvalidArgument: not a repository of this server ("failed to unregister '<path>',
                repository not found").
        """
        resolved = Path(path).expanduser().resolve()
        if resolved not in self.paths:
            raise InvalidArgument(f"failed to unregister '{path}', repository not found")
        self.paths.remove(resolved)
        self.mappings = {name: where for name, where in self.mappings.items() if where[0] != resolved}

    def named_folders(self, repository: Path) -> list[tuple[str, Path]]:
        """``(model name, folder)`` of each model folder of ``repository``: the folder's name,
        or the name it is mapped to by :meth:`register`."""
        mapped = {folder: name for name, (repo, folder) in self.mappings.items() if repo == repository}
        return [(mapped.get(child, child.name), child) for child in model_folders(repository)]

    def scan(self) -> dict[str, ModelLocation]:
        """Every model folder now present, by name (hidden folders are skipped)."""
        found: dict[str, ModelLocation] = {}
        for repo in self.paths:
            for name, child in self.named_folders(repo):
                if name in found:
                    first = found[name].path
                    found[name] = ModelLocation(
                        name,
                        None,
                        f"model '{name}' appears in multiple repositories "
                        f"('{first}' and '{child}')",
                    )
                    continue
                found[name] = ModelLocation(name, child)
        return found

    def locate(self, name: str) -> ModelLocation | None:
        """The model folder called ``name``, or None."""
        return self.scan().get(name)


def model_folders(repository: Path) -> list[Path]:
    """The model folders of one local repository folder, sorted: its sub-folders, less the
    hidden ones (``.ipynb_checkpoints``, a remote mirror's temporary files)."""
    return [
        child for child in sorted(repository.iterdir())
        if child.is_dir() and not child.name.startswith(".")
    ]
