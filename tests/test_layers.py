"""Architecture rules: layers import downwards only; the public surface is exactly __all__."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

PACKAGE = Path(workbench.__file__).parent
#: packages that may only use the public names re-exported by `workbench`
ADAPTERS = ("frontends", "hosts", "ui", "jupyter", "perf", "deploy", "serving")
#: the engine's internals, which adapters must never reach
INTERNALS = ("workbench.backends", "workbench.scheduling", "workbench.engine", "workbench.config",
             "workbench.repository")
#: lower layers must not import web/RPC frameworks
FRAMEWORKS = ("fastapi", "starlette", "uvicorn", "grpc", "tornado", "jupyter_server")
CORE = ("config", "repository", "backends", "scheduling", "engine")


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def test_adapters_use_only_the_public_api() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in imports_of(path) if n.startswith(INTERNALS))
        for folder in ADAPTERS
        for path in modules_under(folder)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_layers_import_no_web_framework() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in imports_of(path) if n.split(".")[0] in FRAMEWORKS
        )
        for folder in CORE
        for path in modules_under(folder)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_lower_layers_never_import_upper_ones() -> None:
    order = ["config", "repository", "backends", "scheduling", "engine"]
    for rank, folder in enumerate(order):
        upper = tuple(f"workbench.{name}" for name in order[rank + 1 :]) + (
            "workbench.frontends", "workbench.hosts", "workbench.ui", "workbench.jupyter",
            "workbench.perf",
        )
        for path in modules_under(folder):
            bad = sorted(n for n in imports_of(path) if n.startswith(upper))
            assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


def test_public_surface_is_exactly_all() -> None:
    public = {name for name in dir(workbench) if not name.startswith("_")}
    modules = {"backends", "bytes_codec", "config", "datatypes", "deploy", "devices", "engine", "errors", "flags",
               "frontends", "gpu_memory", "gpu_readings", "hosts", "jupyter", "options", "perf", "repository",
               "restrictions", "scheduling", "serving", "statistics", "switches", "tensors", "testing", "tools",
               "types", "ui", "live_stats"}
    assert public - modules == set(workbench.__all__) - {"__version__"}


def test_tools_stay_beside_the_engine() -> None:
    """Offline tools (``workbench build-plan``) use the config layer's model knowledge only."""
    forbidden = ("workbench.backends", "workbench.scheduling", "workbench.engine",
                 "workbench.frontends", "workbench.hosts")
    for path in modules_under("tools"):
        bad = sorted(n for n in imports_of(path) if n.startswith(forbidden))
        assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


#: the hosts and the UI: none imports another, only the shared modules below them
SIDE_BY_SIDE = ("hosts", "ui", "jupyter")
#: what they share, below them: the v2 ports, listeners and drain, and the live statistics
SHARED_BELOW = ("workbench.serving", "workbench.live_stats")
#: the one allowed crossing: the Jupyter extension mounts the dashboard through its entry points
MOUNTS = {("jupyter", "workbench.ui")}


def test_hosts_and_ui_never_import_each_other() -> None:
    """``workbench serve`` (hosts), the dashboards (ui) and the Jupyter extension share code only
    through :data:`SHARED_BELOW` (the Jupyter extension may import ``workbench.ui`` itself, the
    dashboard it serves, never a ui module)."""
    offenders = {}
    for folder in SIDE_BY_SIDE:
        others = tuple(f"workbench.{name}" for name in SIDE_BY_SIDE if name != folder)
        for path in modules_under(folder):
            bad = sorted(n for n in imports_of(path)
                         if n.startswith(others) and (folder, n) not in MOUNTS)
            if bad:
                offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}


def test_shared_modules_stay_below_the_hosts() -> None:
    above = tuple(f"workbench.{name}" for name in SIDE_BY_SIDE)
    paths = [*modules_under("serving"), PACKAGE / "live_stats.py"]
    offenders = {str(p.relative_to(PACKAGE)): sorted(n for n in imports_of(p) if n.startswith(above))
                 for p in paths}
    assert {k: v for k, v in offenders.items() if v} == {}
