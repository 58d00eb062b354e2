"""The tuner against a real engine (temporary copies of the sample models, explicit model
control): a quick search measures, restores the files' configs and leaves config.pbtxt
untouched; an unstable run recommends nothing; Stop, resume and Apply; an ensemble's steps
and a BLS model's callee are found from the server's statistics."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from workbench import Server, ServerOptions
from workbench.perf import PerfOptions, prepare_workload
from workbench.testing.ensembles import build_ensemble_repository
from workbench.tuning import (
    EngineTarget,
    Goals,
    MeasureOptions,
    NothingToApply,
    Tuner,
    TuneSpec,
    apply_result,
    tune,
)
from workbench.tuning.decide import Decision
from workbench.tuning.ensembles import step_models
from workbench.tuning.points import Point

#: short windows: the test checks the mechanics, not the numbers
FAST: dict[str, Any] = {"measurement_interval_ms": 300, "warmup_ms": 100, "progress": False}


@pytest.fixture
def repository(sample_repository: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "repository"
    for name in ("digits_mlp", "digits_router"):
        shutil.copytree(sample_repository / name, repo / name, symlinks=False)
    return repo


async def started(repo: Path, *models: str) -> Server:
    server = Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                                  load_model=list(models)))
    await server.start()
    return server


async def test_a_quick_search_measures_then_serves_the_file_config_again(repository: Path) -> None:
    server = await started(repository, "digits_mlp")
    before = (repository / "digits_mlp" / "config.pbtxt").read_bytes()
    try:
        result = await tune(server, "digits_mlp", space="instance_count=1,2", levels="1,2", sla_ms=1000,
                            stability_percentage=60, **FAST)
        served = await server.model_config("digits_mlp")
    finally:
        await server.stop()
    assert {p.setting.label for p in result.points} == {"instance_count=1", "instance_count=2"}
    assert result.measurements == len(result.points) >= 2
    assert served.instance_group[0].count == 1  # the file's config again
    assert (repository / "digits_mlp" / "config.pbtxt").read_bytes() == before
    assert not (repository / "digits_mlp" / "config.pbtxt.bak").exists()
    assert result.memory is not None and "RSS" in result.memory.method
    data = json.loads(result.json_text())
    assert data["model"] == "digits_mlp" and data["target"] == "in-process engine"
    assert len(data["points"]) == len(result.points) and data["why"] == result.decision.why
    assert "<svg" in result.html() and "instance_count=2" in result.csv_text()


async def test_an_unstable_sweep_recommends_nothing_and_apply_refuses(repository: Path) -> None:
    server = await started(repository, "digits_mlp")
    try:
        result = await tune(server, "digits_mlp", space="instance_count=1,2", levels="1", sla_ms=1000,
                            stability_percentage=0.001, max_windows=3, **FAST)
        assert result.chosen is None and not result.decision.apply
        assert "every measurement was unstable" in result.decision.why
        with pytest.raises(NothingToApply, match="unstable"):
            await apply_result(server, result)
    finally:
        await server.stop()
    assert all(not p.stable for p in result.points) and len(result.points) >= 2


async def test_apply_writes_the_chosen_knobs_keeping_comments(repository: Path) -> None:
    server = await started(repository, "digits_mlp")
    file = repository / "digits_mlp" / "config.pbtxt"
    original = file.read_text()
    try:
        result = await tune(server, "digits_mlp", space="instance_count=1,2", levels="1", sla_ms=1000,
                            stability_percentage=60, **FAST)
        two: Point = next(p for p in result.points if p.setting.label == "instance_count=2")
        result.decision = Decision(two, result.decision.baseline, True, "chosen for the test")
        written = await apply_result(server, result)
        served = await server.model_config("digits_mlp")
    finally:
        await server.stop()
    assert written["digits_mlp"]["kept"] and served.instance_group[0].count == 2
    text = file.read_text()
    comments = [line for line in original.splitlines() if line.lstrip().startswith("#")]
    assert comments and all(line in text.splitlines() for line in comments)
    assert (repository / "digits_mlp" / "config.pbtxt.bak").read_text() == original


async def test_stop_ends_the_run_with_what_it_measured_and_restores(repository: Path) -> None:
    server = await started(repository, "digits_mlp")
    first_point = asyncio.Event()

    def on_event(event) -> None:
        if event.kind == "point":
            first_point.set()

    spec = TuneSpec("digits_mlp", Goals(sla_ms=1000), space="instance_count=1,2", levels="1,2,4,8",
                    strategy="brute",
                    measure=MeasureOptions(PerfOptions("digits_mlp", measurement_interval_ms=300, warmup_ms=100),
                                           stability_percentage=60))
    tuner = Tuner(EngineTarget(server), spec, on_event)
    try:
        run = asyncio.ensure_future(tuner.run())
        await first_point.wait()
        tuner.stop()
        result = await run
        served = await server.model_config("digits_mlp")
    finally:
        await server.stop()
    assert result.stopped and 1 <= len(result.points) < 8
    assert served.instance_group[0].count == 1


async def test_resume_takes_the_saved_points_instead_of_measuring_again(repository: Path, tmp_path: Path) -> None:
    server = await started(repository, "digits_mlp")
    state = tmp_path / "state.json"
    try:
        first = await tune(server, "digits_mlp", space="instance_count=1,2", levels="1", sla_ms=1000,
                           stability_percentage=60, resume=str(state), **FAST)
        again = await tune(server, "digits_mlp", space="instance_count=1,2", levels="1", sla_ms=1000,
                           stability_percentage=60, resume=str(state), **FAST)
        with pytest.raises(ValueError, match="resumes a run of model 'digits_mlp'"):
            await tune(server, "digits_router", resume=str(state), **FAST)
    finally:
        await server.stop()
    assert first.measurements == len(first.points) and again.measurements == 0
    assert [p.throughput for p in again.points] == [p.throughput for p in first.points]
    assert all(p.from_resume for p in again.points)


async def test_a_bls_model_s_callee_is_found_from_the_statistics(repository: Path) -> None:
    server = await started(repository, "digits_mlp", "digits_router")
    try:
        target = EngineTarget(server)
        config = await target.served_config("digits_router")
        workload = await prepare_workload(target.client, PerfOptions("digits_router"))
        found = await step_models(target, config, workload, PerfOptions("digits_router"))
    finally:
        await server.stop()
    assert found == ["digits_mlp"]  # called through pb_utils.InferenceRequest; no config says so


async def test_an_ensemble_is_tuned_by_its_steps(tmp_path: Path) -> None:
    repo = build_ensemble_repository(tmp_path / "ensembles")
    server = await started(repo, "ens_chain")
    try:
        result = await tune(server, "ens_chain", space="add_sub/instance_count=1,2", levels="1",
                            stability_percentage=60, strategy="brute", **FAST)
        served = await server.model_config("add_sub")
    finally:
        await server.stop()
    assert {p.setting.label for p in result.points} == {"add_sub/instance_count=1", "add_sub/instance_count=2"}
    steps = result.points[0].steps
    assert {"add_sub", "identity16"} <= set(steps) and steps["add_sub"]["executions"] > 0
    assert served.instance_group[0].count == 2  # add_sub's own file: 2 instances, restored
