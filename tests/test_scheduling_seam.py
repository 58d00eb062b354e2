"""The seam between the dispatcher and its batch policies is one-way, and the counts have one owner.

The :class:`~workbench.scheduling.dispatcher.Dispatcher` calls its policy; a policy calls back
only what :class:`~workbench.scheduling.base.PolicyHost` names (``self.dispatcher.<member>``),
and no policy holds or reaches into a ``Dispatcher`` (the sequence batcher's scheduler is a
dispatcher that passes calls down to it: ``sequence_scheduler.py``). ``statistics.pending``
(queued requests) and the in-flight count are changed in the dispatcher's counting methods alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

SCHEDULING = Path(workbench.__file__).parent / "scheduling"
#: every scheduling module: the policies (direct, dynamic_batcher, sequence_*), and any added later
MODULES = sorted(p.name for p in SCHEDULING.glob("*.py"))
#: the only places that change the queued / in-flight counts: (function, attribute)
COUNTERS = {("_queued", "pending"), ("_left_queue", "pending"), ("enqueue", "_inflight"),
            ("answer", "_inflight")}


def _class_members(path: Path, name: str) -> set[str]:
    """The names a class of ``path`` defines (methods and properties)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return set()


def _uses(path: Path, owner: str) -> list[tuple[int, str]]:
    """``(line, member)`` of every ``self.<owner>.<member>`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr == owner and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"):
            found.append((node.lineno, node.attr))
    return found


def test_policies_call_only_the_policy_host() -> None:
    allowed = _class_members(SCHEDULING / "base.py", "PolicyHost")
    assert {"drop", "fail_queued", "dispatch_at"} <= allowed
    assert "answer" not in allowed  # a policy returns the answers it decides on
    offenders = [f"{name}:{line} self.dispatcher.{member}"
                 for name in MODULES
                 for line, member in _uses(SCHEDULING / name, "dispatcher")
                 if member not in allowed]
    assert offenders == []


def test_the_dispatcher_offers_the_whole_policy_host() -> None:
    missing = _class_members(SCHEDULING / "base.py", "PolicyHost") - _class_members(
        SCHEDULING / "dispatcher.py", "Dispatcher") - {"runners"}  # an attribute there
    assert missing == set()


def _policy_modules() -> list[str]:
    """The modules defining a batch policy: a class based on ``BatchPolicy``, or on one of
    those (``SequenceBatcher``), found by name across the scheduling modules."""
    trees = {name: ast.parse((SCHEDULING / name).read_text()) for name in MODULES}
    classes = [(name, node) for name, tree in trees.items() for node in tree.body
               if isinstance(node, ast.ClassDef)]
    policies, found = {"BatchPolicy"}, True
    while found:
        found = False
        for _, node in classes:
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if node.name not in policies and bases & policies:
                policies.add(node.name)
                found = True
    return sorted({name for name, node in classes if node.name in policies - {"BatchPolicy"}})


def test_the_policy_modules_are_found() -> None:
    assert {"direct.py", "dynamic_batcher.py", "sequence_batcher.py", "sequence_direct.py",
            "sequence_oldest.py"} <= set(_policy_modules())
    assert "dispatcher.py" not in _policy_modules()


def test_policies_name_the_dispatcher_only_to_build_one() -> None:
    """A policy module may construct a ``Dispatcher`` in a module-level factory (and name it as
    its return type), never subclass, hold or reach into one."""
    offenders = []
    for name in _policy_modules():
        tree = ast.parse((SCHEDULING / name).read_text())
        factories = [f for f in tree.body if isinstance(f, ast.FunctionDef)]  # module-level ones
        calls = {id(n.func) for f in factories for n in ast.walk(f) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Name) and node.id == "Dispatcher" and id(node) not in calls
                    and not _in_annotation(tree, node)):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def _in_annotation(tree: ast.Module, target: ast.Name) -> bool:
    """True when ``target`` is (in) a function's return annotation (a factory's ``-> Dispatcher``)."""
    return any(isinstance(node, ast.FunctionDef) and node.returns is not None
               and any(n is target for n in ast.walk(node.returns))
               for node in ast.walk(tree))


def test_only_the_dispatcher_answers_requests() -> None:
    """No policy module resolves a request's future: it returns its answers to the dispatcher
    (``BatchPolicy.complete``, ``abandon``), which alone answers (``Dispatcher.answer``)."""
    offenders = [
        f"{name}:{node.lineno} .{node.func.attr}"
        for name in _policy_modules()
        for node in ast.walk(ast.parse((SCHEDULING / name).read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("set_result", "set_exception", "answer", "finish")
    ]
    assert offenders == []


def test_the_counts_are_kept_in_one_place() -> None:
    """``statistics.pending`` and the dispatcher's in-flight count change only in its counting
    methods: nowhere in scheduling is either assigned by hand."""
    offenders = []
    for path in sorted(SCHEDULING.glob("*.py")):
        if path.name in ("ensemble.py", "ensemble_run.py"):
            continue  # the ensemble scheduler keeps its own in-flight count (no dispatcher)
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.AugAssign, ast.Assign)):
                    targets = [node.target] if isinstance(node, ast.AugAssign) else node.targets
                    for target in targets:
                        if (isinstance(target, ast.Attribute) and target.attr in ("pending", "_inflight")
                                and (function.name, target.attr) not in COUNTERS
                                and not (function.name == "__init__" and isinstance(node, ast.Assign))):
                            offenders.append(f"{path.name}:{node.lineno} {function.name} .{target.attr}")
    assert offenders == []
