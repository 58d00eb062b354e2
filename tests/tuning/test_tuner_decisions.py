"""The tuner's decisions on real, tiny runs (a temporary copy of ``digits_mlp``, windows of
200 ms): what it says when nothing meets the SLA, and a served value the space leaves out."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from workbench import Server, ServerOptions
from workbench.tuning import tune

#: short windows, at most three per point: enough to exercise the decision, not to trust it
QUICK: dict[str, Any] = {"measurement_interval_ms": 200, "warmup_ms": 50, "max_windows": 3, "progress": False}


@pytest_asyncio.fixture
async def server(tmp_path: Path, sample_repository: Path) -> AsyncIterator[Server]:
    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "digits_mlp")
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["digits_mlp"])
    async with Server(options) as engine:
        yield engine


async def test_an_sla_nothing_meets_is_said_not_blamed_on_noise(server: Server) -> None:
    """A point over twice the SLA in two windows is cut short, so it is never stable; that a
    run of only such points was 'unstable' (use longer windows, a quieter machine) was the
    wrong advice: nothing met the SLA."""
    result = await tune(server, "digits_mlp", sla_ms=0.001, space="instance_count=1", levels="1", **QUICK)
    assert result.decision.chosen is None and not result.decision.apply
    assert result.decision.why.startswith("no measurement meets p99 ≤ 0.001 ms")
    assert "> SLA 0.001 ms" in result.decision.why and "unstable" not in result.decision.why


async def test_a_space_without_the_served_value_is_still_searched(server: Server) -> None:
    """``--space instance_count=2`` on a model serving one instance: the served config is
    measured first (the baseline), then the space (the quick search found no neighbour of a
    value off the axis and stopped after the baseline; brute force skipped the baseline)."""
    for strategy in ("quick", "brute"):
        result = await tune(server, "digits_mlp", space="instance_count=2", levels="1", strategy=strategy,
                            stability_percentage=1000, **QUICK)
        assert [p.setting.label for p in result.points] == ["instance_count=1", "instance_count=2"], strategy

