"""``workbench tune-plan``: saved ``workbench tune --json`` results of two models planned under
one memory budget, read back through the JSON (constructed points, real code paths)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tuning.tuning_points import point, setting
from workbench.hosts.cli import main
from workbench.perf import LoadLevel
from workbench.tuning import Goals, Machine, SearchSpace, TuneResult, decide
from workbench.tuning.budget import options_from_json
from workbench.tuning.memory import MemoryEstimate

MACHINE = Machine(cores=2, memory_total_mb=1024, memory_available_mb=512)


def saved(folder: Path, model: str, per_instance_mb: float, throughputs: dict[int, float]) -> Path:
    """A result of ``model`` whose ``instance_count=n`` setting measured ``throughputs[n]``."""
    goals = Goals(sla_ms=10)
    points = [point(setting(instance_count=n), [t, t, t], 2) for n, t in throughputs.items()]
    space = SearchSpace({"instance_count": tuple(throughputs)}, (LoadLevel.concurrency(1),), {"instance_count": 1})
    decision = decide(points, space.baseline(), goals, {}, 10)
    result = TuneResult(model, "in-process engine", "brute", space, goals, points, decision, MACHINE, [],
                        memory=MemoryEstimate(40.0, per_instance_mb, "a test's figure"))
    path = folder / f"{model}.json"
    path.write_text(result.json_text())
    return path


def test_two_results_are_planned_under_the_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = saved(tmp_path, "digits_mlp", 10.0, {1: 1000, 2: 1900})
    b = saved(tmp_path, "minilm_encoder", 90.0, {1: 40, 2: 70})
    assert [o.instances for o in options_from_json(json.loads(a.read_text()))] == [1, 2]
    out = tmp_path / "plan.json"
    assert main(["tune-plan", str(a), str(b), "--budget-mb", "120", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "digits_mlp 10.0 MiB × 2 + minilm_encoder 90.0 MiB × 1 = 110.0 MiB of 120 MiB" in printed
    plan = json.loads(out.read_text())
    assert [(c["model"], c["instances"]) for c in plan["chosen"]] == [("digits_mlp", 2), ("minilm_encoder", 1)]


def test_nothing_fits_and_a_bad_file_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = saved(tmp_path, "digits_mlp", 10.0, {1: 1000, 2: 1900})
    b = saved(tmp_path, "minilm_encoder", 90.0, {1: 40, 2: 70})
    assert main(["tune-plan", str(a), str(b), "--budget-mb", "50"]) == 1
    assert "infeasible: minilm_encoder needs at least 90.0 MiB" in capsys.readouterr().out
    junk = tmp_path / "junk.json"
    junk.write_text('{"model": "x"}')
    assert main(["tune-plan", str(junk), "--budget-mb", "50"]) == 1
    assert "not a workbench tune --json result" in capsys.readouterr().err
