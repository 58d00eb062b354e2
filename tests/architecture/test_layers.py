"""Architecture rules: layers import downwards only; the public surface is exactly __all__."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

PACKAGE = Path(workbench.__file__).parent
#: packages that may only use the public names re-exported by `workbench`
ADAPTERS = ("frontends", "hosts", "ui", "jupyter", "perf", "deploy", "serving", "config_edits", "tuning",
            "remote", "tritonserver", "ray")
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


def is_under(name: str, packages: tuple[str, ...]) -> bool:
    """``name`` is one of ``packages`` or a module inside one (``workbench.config_edits`` is
    not inside ``workbench.config``)."""
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_adapters_use_only_the_public_api() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in imports_of(path) if is_under(n, INTERNALS))
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
        upper = (
            *(f"workbench.{name}" for name in order[rank + 1 :]),
            "workbench.frontends", "workbench.hosts", "workbench.ui", "workbench.jupyter",
            "workbench.perf", "workbench.config_edits", "workbench.tuning",
        )
        for path in modules_under(folder):
            bad = sorted(n for n in imports_of(path) if n.startswith(upper))
            assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


def test_public_surface_is_exactly_all() -> None:
    public = {name for name in dir(workbench) if not name.startswith("_")}
    modules = {"backends", "common", "config", "config_edits", "deploy", "engine", "files", "frontends", "gpu",
               "hosts", "jupyter", "messages", "perf", "ray", "remote", "repository", "scheduling", "serving",
               "startup", "stats", "testing", "tools", "tracing", "tritonserver", "tuning", "ui"}
    assert public - modules == set(workbench.__all__) - {"__version__"}


def test_tools_stay_beside_the_engine() -> None:
    """Offline tools (``workbench build-plan``) use the config layer's model knowledge only."""
    forbidden = ("workbench.backends", "workbench.scheduling", "workbench.engine",
                 "workbench.frontends", "workbench.hosts")
    for path in modules_under("tools"):
        bad = sorted(n for n in imports_of(path) if n.startswith(forbidden))
        assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


#: the hosts and the UI: none imports another, only the shared modules below them
SIDE_BY_SIDE = ("hosts", "ui", "jupyter", "tritonserver")
#: what they share, below them: the v2 ports, listeners and drain, and the live statistics
SHARED_BELOW = ("workbench.serving", "workbench.serving.live_stats")
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


#: scheduler-only data of a request: kept on the scheduler's queued entry, never in the
#: backend contract (issue 35)
SCHEDULER_ONLY = {"compute_totals", "trace"}


def test_backends_never_see_scheduler_only_data() -> None:
    """``BackendRequest`` carries what a backend uses; an ensemble step's compute totals and a
    sampled request's trace stay with the scheduler (``Pending``), and no backend reads them."""
    from dataclasses import fields

    from workbench.backends.base import BackendRequest
    from workbench.scheduling.base import Pending

    assert {f.name for f in fields(BackendRequest)} & SCHEDULER_ONLY == set()
    assert {f.name for f in fields(Pending)} >= SCHEDULER_ONLY
    readers = {}
    for path in (PACKAGE / "backends").rglob("*.py"):
        names = {node.attr for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute) and node.attr in SCHEDULER_ONLY}
        if names:
            readers[str(path.relative_to(PACKAGE.parent))] = sorted(names)
    assert readers == {}


def test_shared_modules_stay_below_the_hosts() -> None:
    above = tuple(f"workbench.{name}" for name in SIDE_BY_SIDE)
    paths = modules_under("serving")
    offenders = {str(p.relative_to(PACKAGE)): sorted(n for n in imports_of(p) if n.startswith(above))
                 for p in paths}
    assert {k: v for k, v in offenders.items() if v} == {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the workbench modules it imports, every import counted: top level, inside
    functions and under ``TYPE_CHECKING`` alike (``from pkg import submodule`` is an edge to
    the submodule, relative imports resolved)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*stem, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths]
                targets.extend(subs if len(subs) == len(node.names) else [*subs, base])
        graph[module] = {t for t in map(known, targets) if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "workbench.engine.models.lifecycle" in import_graph()["workbench.engine.api.server"]


def test_workbench_has_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (``start`` left out)."""
    seen: set[str] = set()
    frontier = [start]
    while frontier:
        for other in graph.get(frontier.pop(), set()) - seen:
            seen.add(other)
            frontier.append(other)
    return seen - {start}


#: the engine's model seam (issue 35), as Triton's ``ModelRepositoryManager`` over its
#: ``ModelLifecycle``: the model lifecycle (how one model's versions load, switch, drain and
#: unload, their states) never reaches the modules that decide which models load and when
#: (the repository manager, the poller that drives it, the ensembles' dependency recheck it
#: runs); the manager calls the lifecycle, which reaches the repositories only through the
#: ``locate`` callback each load is given
MODEL_LIFECYCLE = "workbench.engine.models.lifecycle"
MANAGER_SIDE = {"workbench.engine.manager.repository_manager", "workbench.engine.manager.poller",
                "workbench.engine.manager.dependents"}
#: the packages of the two sides: every module of ``engine/models`` (the lifecycle's side) reaches
#: no module of ``engine/manager``
LIFECYCLE_PACKAGE, MANAGER_PACKAGE = "workbench.engine.models", "workbench.engine.manager"


def test_reachable_follows_imports_through_other_modules() -> None:
    assert reachable({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, "a") == {"b", "c"}


def test_model_lifecycle_never_reaches_the_repository_manager() -> None:
    graph = import_graph()
    assert set(graph) >= MANAGER_SIDE, "a module of the seam was renamed: update MANAGER_SIDE"
    assert MODEL_LIFECYCLE in graph["workbench.engine.manager.repository_manager"]  # the one way: manager -> lifecycle
    assert reachable(graph, MODEL_LIFECYCLE) & MANAGER_SIDE == set()
    manager = {m for m in graph if m.startswith(MANAGER_PACKAGE + ".")}
    assert manager >= MANAGER_SIDE
    reaching = {m: sorted(reachable(graph, m) & manager) for m in graph if m.startswith(LIFECYCLE_PACKAGE + ".")}
    assert {m: r for m, r in reaching.items() if r} == {}


#: private names read across modules (``x._name``, x not self / cls / super(), the name not
#: bound in the reading module): file -> (names, why they must be)
PRIVATE_READS: dict[str, tuple[set[str], str]] = {
    "workbench/ui/shared/kernel_comm.py": (
        {"_callbacks", "_models"},
        "Panel 1.9's notebook comm has no public hook for the browser's messages (the filter of "
        "the kernel's own echoed changes, workbench.ui.shared.kernel_comm)",
    ),
    "tests/ui/test_ui_kernel_comm.py": (
        {"_comms", "_handle_msg", "_models", "_repr_mimebundle_"},
        "drives Panel's notebook comm as JupyterLab does (IPython's _repr_mimebundle_ protocol, "
        "the comm's message handler)",
    ),
    "tests/serving/test_server_flags.py": (
        {"_actions"},
        "argparse has no public list of a parser's actions; the test reads every flag from it",
    ),
    "workbench/backends/python/pb_log.py": (
        {"_getframe"},
        "sys._getframe is the stdlib's documented frame access (the caller's module)",
    ),
    "workbench/backends/python/stub.py": (
        {"_answer_returned", "_close", "_received", "_release_flags", "_sender_key", "_wrap"},
        "hooks of the model-facing pb_utils shim, private so that model code sees Triton's names only",
    ),
    "workbench/backends/python/stub_calls.py": (
        {"_wrap"},
        "as stub.py",
    ),
    "workbench/backends/pytorch.py": (
        {
            "_C",
            "_jit_set_profiling_executor",
            "_jit_set_profiling_mode",
            "_jit_set_texpr_fuser_enabled",
            "_set_graph_executor_optimize",
        },
        "torch has no public switch for the JIT executor (Triton's PyTorch backend uses the same calls)",
    ),
    "workbench/frontends/grpc/decoding.py": (
        {"_replace"},
        "NamedTuple._replace is public API",
    ),
    "workbench/hosts/deploy_command.py": (
        {"_SubParsersAction"},
        "argparse's subparsers type has no public name",
    ),
    "workbench/hosts/serve.py": (
        {"_exit"},
        "os._exit is the stdlib's documented immediate exit",
    ),
    "workbench/jupyter/process_exit.py": (
        {"_exit"},
        "as hosts/serve.py",
    ),
    "workbench/testing/python_models/crasher/1/model.py": (
        {"_exit"},
        "as hosts/serve.py",
    ),
    "workbench/jupyter/dashboard.py": (
        {"_discard_session", "_socket", "_subscribed_connections"},
        "Bokeh has no public API to close a session's sockets "
        "(checked by tests/architecture/test_library_internals.py)",
    ),
    "workbench/ui/shared/panel_writes.py": (
        {
            "_WRITE_BLOCK",
            "_WRITE_FUTURES",
            "_WRITE_MSGS",
            "_block",
            "_run_write_futures",
            "_socket",
            "_value",
        },
        "works around Panel's document write queue (its internals) "
        "(checked by tests/architecture/test_library_internals.py)",
    ),
    "tests/python_backend/test_python_pb_utils.py": (
        {"_received"},
        "checks that the stub's check-free request constructor sets what __init__ sets",
    ),
    "tests/architecture/test_library_internals.py": (
        {"_on_msg", "_override_method_handler", "_render_model", "_replace", "_run_write_futures"},
        "checks that the library internals the modules above use still exist with their shape",
    ),
    "tests/jupyter/test_jupyter_open_ports.py": (
        {"_cleanup"},
        "jupyter_server's fixture exposes no public cleanup",
    ),
    "tests/backends/test_pytorch_backend.py": (
        {"_C", "_get_graph_executor_optimize"},
        "as pytorch.py",
    ),
    "tests/engine/test_shared_memory.py": (
        {"_mpsm_handle"},
        "tritonclient's shm handle has no public accessor for its mapping",
    ),
    "tests/ui/test_ui_panel_writes.py": (
        {"_WRITE_BLOCK", "_WRITE_FUTURES", "_WRITE_MSGS"},
        "as ui/panel_writes.py",
    ),
    "tests/ui/test_ui_models.py": (
        {"_process_event"},
        "Panel's Tabulator has no public way to send a cell click",
    ),
    # not yet given a public read API (outside issue 18 item 1's lifecycle seam):
    "tests/serving/test_live_stats.py": (
        {"_latencies"},
        "the live view's samples: no read API yet",
    ),
    "tests/ui/test_ui_live.py": (
        {"_latencies"},
        "as test_live_stats.py",
    ),
    "tests/jupyter/test_jupyter_tuning.py": (
        {"_task"},
        "the tuning view's run task: no read API yet",
    ),
    "tests/ui/test_ui_config_editor.py": (
        {"_validation"},
        "the editor's pending validation: no read API yet",
    ),
    "tests/frontends/grpc/test_grpc_native.py": (
        {"_infer"},
        "which path a native gRPC call took (decoded by C++, or parsed by protobuf in Python): "
        "both answer the same bytes by design, so the answer cannot tell",
    ),
    "tests/python_backend/test_python_backend_lifecycle.py": (
        {"_stub"},
        "kills one stub process: a Python instance exposes no stub process",
    ),
}


def private_reads(path: Path) -> set[str]:
    """The private names ``path`` reads across modules (see :data:`PRIVATE_READS`)."""
    tree = ast.parse(path.read_text())
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            bound.add(node.attr)
    reads = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        if node.attr not in bound:
            reads.add(node.attr)
    return reads


def test_private_read_finder_sees_one() -> None:
    path = Path(__file__).parents[1] / "engine" / "test_engine.py"
    assert private_reads(path) == set()
    assert private_reads(PACKAGE / "backends" / "pytorch.py") >= {"_C"}


def test_no_private_attribute_access_across_modules() -> None:
    root = PACKAGE.parent
    found = {}
    for path in [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py")]:
        reads = private_reads(path)
        if reads:
            found[str(path.relative_to(root))] = reads
    unexpected = {f: sorted(r - PRIVATE_READS.get(f, (set(), ""))[0]) for f, r in found.items()}
    assert {f: r for f, r in unexpected.items() if r} == {}
    stale = {f: sorted(names - found.get(f, set())) for f, (names, _) in PRIVATE_READS.items()}
    assert {f: n for f, n in stale.items() if n} == {}, "allowed reads no longer made: drop them"


#: the engine's packages along Triton's seams, bottom first: each imports only packages before it
#: (a loaded model version < the model lifecycle < the repository manager < rollouts < the server
#: surface); shared memory stands beside them, used by the server surface alone
ENGINE_ORDER = ("inference", "models", "manager", "rollout", "api")
ENGINE_BESIDE = {"shm": ("api",)}


def test_engine_packages_import_downwards() -> None:
    graph = import_graph()
    offenders: dict[str, list[str]] = {}
    for module, targets in graph.items():
        parts = module.split(".")
        if parts[:2] != ["workbench", "engine"] or len(parts) < 4:
            continue
        package = parts[2]
        for target in targets:
            other = target.split(".")
            if other[:2] != ["workbench", "engine"] or len(other) < 4 or other[2] == package:
                continue
            if other[2] in ENGINE_BESIDE:
                allowed = package in ENGINE_BESIDE[other[2]]
            elif package in ENGINE_BESIDE:
                allowed = False
            else:
                allowed = ENGINE_ORDER.index(other[2]) < ENGINE_ORDER.index(package)
            if not allowed:
                offenders.setdefault(module, []).append(target)
    assert offenders == {}
    assert {p.name for p in (PACKAGE / "engine").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        *ENGINE_ORDER, *ENGINE_BESIDE}, "an engine package was added or renamed: place it in ENGINE_ORDER"


#: the dashboard's tabs, one package each: a tab imports ``workbench/ui/shared/`` and no other tab
UI_TABS = ("models", "config", "live", "tuning", "rollout", "headless", "attach")


def test_ui_tabs_never_import_each_other() -> None:
    offenders = {}
    for tab in UI_TABS:
        others = tuple(f"workbench.ui.{name}" for name in UI_TABS if name != tab)
        for path in modules_under(f"ui/{tab}"):
            bad = sorted(n for n in imports_of(path) if is_under(n, others))
            if bad:
                offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}
    above = (*(f"workbench.ui.{name}" for name in UI_TABS), "workbench.ui.app", "workbench.ui.widgets")
    for path in modules_under("ui/shared"):
        assert not [n for n in imports_of(path) if is_under(n, above)], path
