"""ARCHITECTURE.md names only files and definitions that exist, so it cannot rot silently.

Every ``path/to/file.py`` (relative to the repository root) and ``path/to/file.py:name``
reference in it is checked: the file exists and, for ``:name``, defines that name at module
level (class, function, assignment) or, for ``Class.method`` / ``Class.attribute``, inside
that class (read with :mod:`ast`, nothing imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"

#: ``dir/file.py`` or ``dir/file.py:Name.attr``, not inside a longer path or word
REFERENCE = re.compile(r"(?<![\w/.<>-])((?:[\w-]+/)*[\w-]+\.py)(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?")


def references(text: str) -> list[tuple[str, str | None]]:
    """``(path, dotted name or None)`` of every reference in ``text``, in order."""
    return [(m.group(1), m.group(2)) for m in REFERENCE.finditer(text)]


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body binds: defs, classes, (annotated) assignments."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def defines(source: str, dotted: str) -> bool:
    """True when ``source`` (a module's text) defines ``dotted`` (``f``, ``C``, ``C.m``)."""
    body: list[ast.stmt] = ast.parse(source).body
    node: ast.AST | None = None
    for part in dotted.split("."):
        node = _names(body).get(part)
        if node is None:
            return False
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def broken_references(text: str, root: Path) -> list[str]:
    """The references in ``text`` whose file (under ``root``) or name does not exist."""
    broken = []
    for path, name in references(text):
        file = root / path
        if not file.is_file():
            broken.append(f"{path}: no such file")
        elif name is not None and not defines(file.read_text(), name):
            broken.append(f"{path}:{name}: not defined there")
    return broken


def test_reference_checker_sees_broken_ones() -> None:
    text = ("`workbench/engine/api/server.py:Server.infer` `workbench/engine/api/server.py:Server.nope` "
            "`workbench/nope.py` `workbench/engine/models/lifecycle.py:ModelLifecycle` "
            "`workbench/engine/api/server.py:nothing` `tests/architecture/test_layers.py:ADAPTERS`")
    assert broken_references(text, ROOT) == [
        "workbench/engine/api/server.py:Server.nope: not defined there",
        "workbench/nope.py: no such file",
        "workbench/engine/api/server.py:nothing: not defined there",
    ]
    assert references("in `a/b.py:C.m`, a/c.py and ../up/d.py") == [("a/b.py", "C.m"), ("a/c.py", None)]


def test_architecture_doc_names_only_what_exists() -> None:
    text = DOC.read_text()
    found = references(text)
    assert len(found) > 80, "the reference pattern no longer matches the doc's references"
    assert broken_references(text, ROOT) == []


def test_readme_links_the_architecture_doc() -> None:
    assert "(ARCHITECTURE.md)" in (ROOT / "README.md").read_text()
