"""Stop before the strategy starts: the run ends with nothing measured (the Tuning tab's Stop
can come while the tuner still reads the model and takes its speed probe; it was ignored,
and the whole search ran)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from workbench import Server, ServerOptions
from workbench.perf import PerfOptions
from workbench.tuning import EngineTarget, Goals, MeasureOptions, Tuner, TuneSpec


async def test_a_stop_before_the_strategy_starts_measures_nothing(tmp_path: Path,
                                                                  sample_repository: Path) -> None:
    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "digits_mlp")
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["digits_mlp"])
    async with Server(options) as server:
        perf = PerfOptions("digits_mlp", measurement_interval_ms=200, warmup_ms=50)
        spec = TuneSpec("digits_mlp", Goals(), space="instance_count=1,2", levels="1,2",
                        measure=MeasureOptions(perf, max_windows=3))
        tuner = Tuner(EngineTarget(server), spec)
        run = asyncio.ensure_future(tuner.run())
        await asyncio.sleep(0)  # the run has begun (it reads the served config)
        tuner.stop()
        result = await run
    assert result.stopped and result.points == [] and result.windows == 0
    assert result.decision.why == "nothing was measured" and not result.decision.apply

