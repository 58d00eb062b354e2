"""Model repository scan: ``<repository>/<model>/[config.pbtxt, <version>/...]``.

Follows Triton's model repository layout: every sub-folder of a repository is a
model named after the folder; several repositories may be given, and a model
name found in two of them is an error for that model (it is not served).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import InvalidArgument

log = logging.getLogger(__name__)


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

    def scan(self) -> dict[str, ModelLocation]:
        """Every model folder now present, by name (hidden folders are skipped)."""
        found: dict[str, ModelLocation] = {}
        for repo in self.paths:
            for child in model_folders(repo):
                if child.name in found:
                    first = found[child.name].path
                    found[child.name] = ModelLocation(
                        child.name,
                        None,
                        f"model '{child.name}' appears in multiple repositories "
                        f"('{first}' and '{child}')",
                    )
                    continue
                found[child.name] = ModelLocation(child.name, child)
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
