"""The third-party packages a repository's Python-backend models import, for the image.

A Python-backend model (``backend: "python"``, or a ``<version>/model.py``) may import anything;
the image has only workbench and its dependencies. This module reads every ``model.py`` (the
config's ``default_model_filename`` where set) and, transitively, the helper modules it imports
from its own folder (which the Python backend puts on ``sys.path``, as Triton does), without
running or importing any of them (``ast``), and resolves each imported top-level name:

* the standard library, ``triton_python_backend_utils`` and ``workbench``: in the image;
* a ``.py`` file or package in the model's folder: a helper module, read in turn;
* a package installed where ``workbench deploy`` runs: its distribution, pinned to the version
  installed here (what the models were tried with), unless workbench itself requires it;
* anything else: a warning (the image would fail to load that model).

Imports inside ``try: ... except ImportError`` are optional: taken when installed here, never
warned about.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata as metadata
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

#: modules every image has besides the standard library: the Python backend's API and workbench
_PROVIDED = frozenset({"triton_python_backend_utils", "workbench", "__future__"})
#: the distribution the image installs from PyTorch's CPU wheel index (see :mod:`dockerfile`)
TORCH = "torch"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Scikit_Learn`` -> ``scikit-learn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ImportSite:
    """One import statement of a model's source: ``module`` (dotted), where it is
    (``file`` relative to the repository, ``line``), and whether it is optional (inside a
    ``try`` that catches ``ImportError``)."""

    module: str
    file: str
    line: int
    optional: bool = False


@dataclass
class PythonRequirements:
    """What the Python-backend models of one repository need in the image.

    Attributes:
        packages: distribution name -> version installed here ("" if unknown), for the
            distributions the models import that workbench does not already require (torch
            excluded: see ``needs_torch``).
        used_by: distribution name -> the models importing it (sorted names).
        needs_torch: a model imports torch, or a package it needs requires torch: the image
            installs a CPU torch first (PyPI's Linux torch wheel bundles CUDA).
        warnings: one sentence per import that nothing here resolves, or per source file that
            cannot be read (each names the model, file and line).
        models: the Python-backend models found (sorted).
    """

    packages: dict[str, str] = field(default_factory=dict)
    used_by: dict[str, list[str]] = field(default_factory=dict)
    needs_torch: bool = False
    warnings: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)

    def requirement_lines(self) -> list[str]:
        """``name==version  # models`` lines for a pip requirements file (sorted)."""
        lines = []
        for name in sorted(self.packages):
            version = self.packages[name]
            pin = f"{name}=={version}" if version else name
            lines.append(f"{pin}  # {', '.join(self.used_by[name])}")
        return lines


def _config(folder: Path) -> ModelConfig:
    config = ModelConfig()
    # no or broken config: the files tell
    with contextlib.suppress(OSError, UnicodeDecodeError, text_format.ParseError):
        text_format.Parse((folder / "config.pbtxt").read_text(encoding="utf-8"), config)
    return config


def python_model_files(repository: Path) -> dict[str, list[Path]]:
    """Model name -> its Python-backend model files (one per version folder), for the models
    whose config says ``backend: "python"`` or that have a ``<version>/model.py``."""
    found: dict[str, list[Path]] = {}
    for folder in sorted(p for p in Path(repository).iterdir() if p.is_dir()):
        config = _config(folder)
        filename = config.default_model_filename or "model.py"
        files = sorted(p for p in folder.glob(f"*/{filename}") if p.is_file())
        if files and (config.backend in ("python", "") and not config.platform):
            found[folder.name] = files
    return found


def _optional_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the statements inside ``try`` blocks that catch ImportError."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught: set[str] = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught.update(k.id for k in kinds if isinstance(k, ast.Name))
            if handler.type is None:
                caught.add("BaseException")
        if caught & _IMPORT_ERRORS:
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
    return lines


def imports_of(source: str, filename: str) -> list[ImportSite]:
    """Every absolute import of ``source`` in source order (at any depth, in functions too), plus
    ``importlib.import_module("name")`` / ``__import__("name")`` with a literal name.
    Relative imports (``from . import x``) are left out: they are the model's own files.

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    tree = ast.parse(source, filename=filename)
    optional = _optional_lines(tree)
    sites: list[ImportSite] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
            continue
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and not node.args[0].value.startswith("."):
                modules = [node.args[0].value]
        sites.extend(ImportSite(m, filename, node.lineno, node.lineno in optional) for m in modules)
    return sorted(sites, key=lambda site: site.line)  # in source order


def _local(folder: Path, top: str) -> list[Path]:
    """The helper files a top-level import names in the model's folder ([] if none)."""
    module = folder / f"{top}.py"
    if module.is_file():
        return [module]
    package = folder / top
    if package.is_dir():
        return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    return []


def model_imports(model_file: Path, repository: Path) -> tuple[list[ImportSite], list[str]]:
    """The non-local imports of ``model_file`` and of the helper modules it reaches in its
    folder, and a warning per file that cannot be parsed."""
    folder = model_file.parent
    pending, seen = [model_file], set()
    sites: list[ImportSite] = []
    problems: list[str] = []
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        relative = path.relative_to(repository).as_posix()
        try:
            found = imports_of(path.read_text(encoding="utf-8"), relative)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            problems.append(f"cannot read the imports of {relative} ({exc}): check its packages "
                            "by hand")
            continue
        for site in found:
            helpers = _local(folder, site.module.split(".")[0])
            if helpers:
                pending.extend(helpers)
            else:
                sites.append(site)
    return sites, problems


class _Installed:
    """What is installed here: top-level module -> distributions, their versions and their
    (non-extra) requirements."""

    def __init__(self) -> None:
        self.by_module = metadata.packages_distributions()

    def distributions(self, module: str) -> list[str]:
        """The distributions providing the dotted ``module`` (several for namespace packages
        such as ``google``: narrowed to those shipping ``module``'s path)."""
        candidates = sorted({canonical(d) for d in self.by_module.get(module.split(".")[0], [])})
        if len(candidates) <= 1 or "." not in module:
            return candidates
        path = module.replace(".", "/")
        narrowed = [d for d in candidates if any(
            str(f).startswith((path + "/", path + ".")) for f in (_files(d) or ()))]
        return narrowed or candidates

    @staticmethod
    def version(name: str) -> str:
        try:
            return metadata.version(name).split("+")[0]  # a local label (+cpu) is no pin
        except metadata.PackageNotFoundError:
            return ""

    @staticmethod
    def requires(name: str) -> list[str]:
        """Canonical names of ``name``'s unconditional requirements ([] if unknown)."""
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            return []
        names = []
        for requirement in requirements:
            if "extra" in requirement.partition(";")[2]:
                continue
            match = _NAME.match(requirement)
            if match:
                names.append(canonical(match.group(1)))
        return names

    def closure(self, names: Iterable[str]) -> set[str]:
        """``names`` and everything they require, transitively (as installed here)."""
        todo, seen = list(names), set()
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.requires(name))
        return seen


def _files(name: str):
    try:
        return metadata.files(name)
    except metadata.PackageNotFoundError:
        return None


def python_requirements(repository: Path) -> PythonRequirements:
    """Scan the Python-backend models of ``repository`` (see the module docstring).

    Returns:
        The packages to install in the image, pinned to the versions installed here, and a
        warning per import nothing here provides.
    """
    repository = Path(repository).resolve()
    installed = _Installed()
    provided = installed.closure(installed.requires("workbench"))  # in the image already
    result = PythonRequirements()
    needed: dict[str, set[str]] = {}
    for model, files in python_model_files(repository).items():
        result.models.append(model)
        for model_file in files:
            sites, problems = model_imports(model_file, repository)
            result.warnings.extend(f"model '{model}': {p}" for p in problems)
            for site in _unique(sites):
                top = site.module.split(".")[0]
                if top in _PROVIDED or top in sys.stdlib_module_names:
                    continue
                distributions = installed.distributions(site.module)
                if not distributions:
                    if not site.optional:
                        result.warnings.append(
                            f"model '{model}' imports '{site.module}' ({site.file} line "
                            f"{site.line}), which no package installed here provides: add the "
                            "package to requirements-models.txt, or the model will not load in "
                            "the image")
                    continue
                for name in distributions:
                    needed.setdefault(name, set()).add(model)
    result.needs_torch = TORCH in installed.closure(needed)
    for name, models in sorted(needed.items()):
        if name == TORCH or name in provided:
            continue
        result.packages[name] = installed.version(name)
        result.used_by[name] = sorted(models)
    return result


def torch_requirement() -> str:
    """The torch requirement of the image: the one of workbench's ``pytorch`` extra (e.g.
    ``torch==2.13.0``), else the version installed here, else plain ``torch``."""
    try:
        requirements = metadata.requires("workbench") or []
    except metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        pin, _, marker = requirement.partition(";")
        match = _NAME.match(pin)
        if match and canonical(match.group(1)) == TORCH and "pytorch" in marker:
            return pin.replace(" ", "")
    version = _Installed.version(TORCH)
    return f"{TORCH}=={version}" if version else TORCH


def _unique(sites: list[ImportSite]) -> Iterator[ImportSite]:
    """One site per module (the first, a required one before optional ones)."""
    seen: dict[str, ImportSite] = {}
    for site in sorted(sites, key=lambda s: (s.optional, s.file, s.line)):
        seen.setdefault(site.module, site)
    yield from seen.values()


__all__ = [
    "TORCH",
    "ImportSite",
    "PythonRequirements",
    "canonical",
    "imports_of",
    "model_imports",
    "python_model_files",
    "python_requirements",
    "torch_requirement",
]
