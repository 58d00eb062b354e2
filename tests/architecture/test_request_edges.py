"""The request edges' two seams (ARCHITECTURE.md, "The request edges"), checked on the source:
every edge reads request bodies through the one body reader
(``workbench/frontends/http/body_limits.py``) and turns exceptions into answers through the one
error boundary (``workbench/frontends/error_boundary.py``); no edge does either on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

PACKAGE = Path(workbench.__file__).parent
#: the one body reader and the one error boundary
READER = "frontends/http/body_limits.py"
BOUNDARY = "frontends/error_boundary.py"
#: where request edges live (and the hosts that serve them)
EDGES = ("frontends", "jupyter", "hosts", "serving", "ui", "remote", "tritonserver")
#: the status tables, read by the boundary alone
TABLES = "workbench.frontends.status"


def sources() -> list[tuple[str, ast.AST]]:
    return [(str(path.relative_to(PACKAGE)), ast.parse(path.read_text()))
            for folder in EDGES for path in sorted((PACKAGE / folder).rglob("*.py"))]


def body_reads(tree: ast.AST) -> list[str]:
    """What reads a request body: ``<x>.body()`` / ``<x>.stream()`` calls (Starlette), tornado's
    ``self.request.body``, ASGI ``message.get("more_body")`` / ``message["more_body"]`` reads."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("body", "stream") and not node.args and not node.keywords:
                found.append(f"line {node.lineno}: .{node.func.attr}()")
            elif (node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)
                  and node.args[0].value == "more_body"):
                found.append(f"line {node.lineno}: .get('more_body')")
        elif (isinstance(node, ast.Attribute) and node.attr == "body"
              and isinstance(node.value, ast.Attribute) and node.value.attr == "request"):
            found.append(f"line {node.lineno}: .request.body")
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
              and isinstance(node.slice, ast.Constant) and node.slice.value == "more_body"):
            found.append(f"line {node.lineno}: ['more_body']")
    return found


def error_mappings(tree: ast.AST) -> list[str]:
    """What maps an error on its own: importing the status tables, or writing the text of an
    unexpected exception ("internal error: ...")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == TABLES:
            found.append(f"line {node.lineno}: from {TABLES} import ...")
        elif isinstance(node, ast.Import) and any(a.name == TABLES for a in node.names):
            found.append(f"line {node.lineno}: import {TABLES}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith("internal error")):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def test_the_finders_see_what_they_look_for() -> None:
    tree = ast.parse("async def f(request, message, self):\n"
                     "    await request.body()\n    request.stream()\n    self.request.body\n"
                     "    message.get('more_body')\n    message['more_body']\n"
                     "    from workbench.frontends.status import http_status\n"
                     "    f'internal error: {1}'\n")
    assert len(body_reads(tree)) == 5
    assert len(error_mappings(tree)) == 2
    sending = ast.parse("async def f(send):\n    await send({'type': 'x', 'more_body': True})\n")
    assert body_reads(sending) == []  # a response's more_body is not a read


def test_only_the_body_reader_reads_request_bodies() -> None:
    offenders = {name: reads for name, tree in sources() if name != READER and (reads := body_reads(tree))}
    assert offenders == {}


def test_only_the_error_boundary_maps_errors() -> None:
    offenders = {name: found for name, tree in sources()
                 if name not in (BOUNDARY, "frontends/status.py") and (found := error_mappings(tree))}
    assert offenders == {}
