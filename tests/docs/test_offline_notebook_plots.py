"""Notebook plots render offline (issue 35): BokehJS comes with the notebook, never from a
CDN. ``bokeh.io.output_notebook()`` loads it from cdn.bokeh.org by default (offline, the
plot is an empty strip with no visible error), and so does ``pn.extension()`` in a notebook
without ``inline=True``. Every call in the tutorial notebooks and in the product's code
(what a notebook imports) must pass ``INLINE`` resources."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
#: product code (what notebooks import and run) and the examples
SOURCES = ("workbench", "examples", "sample_models", "scripts")


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _code(path: Path) -> Iterator[tuple[str, str]]:
    """``(where, source)`` of a Python file, or of each code cell of a notebook (IPython's
    ``%``/``!`` lines left out)."""
    if path.suffix == ".py":
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
        return
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "code":
            lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            yield f"{path.relative_to(ROOT)} cell {index}", "\n".join(lines)


def cdn_calls(where: str, source: str, notebook: bool) -> list[str]:
    """The calls in ``source`` that load BokehJS from a CDN: ``output_notebook`` without
    resources (or with ``CDN``), and in a notebook ``pn.extension`` without ``inline=True``."""
    tree = compile(source, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        if _name(node) == "output_notebook":
            resources = node.args[0] if node.args else keywords.get("resources")
            if resources is None or "CDN" in ast.unparse(resources):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        if notebook and _name(node) == "extension" and "pn" in ast.unparse(node.func):
            inline = keywords.get("inline")
            if not (isinstance(inline, ast.Constant) and inline.value is True):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def _files() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        p for folder in SOURCES for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts)


def test_bokehjs_never_comes_from_a_cdn() -> None:
    found = [call for path in _files() for where, source in _code(path)
             for call in cdn_calls(where, source, path.suffix == ".ipynb")]
    assert found == [], "BokehJS from a CDN (pass bokeh.resources.INLINE / inline=True):\n" + "\n".join(found)


def test_the_check_sees_a_cdn_call() -> None:
    assert cdn_calls("x", "from bokeh.io import output_notebook\noutput_notebook(hide_banner=True)", True)
    assert cdn_calls("x", "import bokeh.io\nbokeh.io.output_notebook(resources=CDN)", False)
    assert cdn_calls("x", "import panel as pn\npn.extension('tabulator')", True)
    assert not cdn_calls("x", "output_notebook(INLINE, hide_banner=True)\npn.extension(inline=True)", True)
