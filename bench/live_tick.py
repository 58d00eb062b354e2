"""What one Live tab tick costs on the engine's loop (server side; the websocket send is not
in it): a ``LiveView`` with 300 kept rows on digits_mlp/2, both versions of digits_mlp under 8
requests between ticks, ``LiveView.tick()`` timed over the last 100 of 330 ticks.

    PYTHONPATH=/work/main python bench/live_tick.py    # before
    PYTHONPATH=. python bench/live_tick.py             # after
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.ui.live.live_view import LiveView
from workbench.ui.shared.store import EngineStore

REPOSITORY = Path(__file__).resolve().parents[1] / "sample_models" / "repository"


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="live-tick-"))
    try:
        shutil.copytree(REPOSITORY / "digits_mlp", work / "digits_mlp")
        async with Server(ServerOptions(model_repository=[str(work)])) as server:
            view = LiveView(EngineStore(server), history=300)
            view.tick()
            view.model.value = "digits_mlp/2"
            pixels = np.ones((1, 64), np.float32)
            times = []
            for _ in range(330):
                await asyncio.gather(*(server.infer(InferenceRequest(
                    "digits_mlp", [Tensor("pixels", "FP32", pixels)], model_version=version))
                    for version in ("1", "2") for _ in range(4)))
                start = time.perf_counter()
                view.tick()
                times.append((time.perf_counter() - start) * 1000)
            view.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    last = times[-100:]
    print(f"tick ms (last 100 of 330, 300 kept rows): median {statistics.median(last):.2f}, "
          f"mean {statistics.mean(last):.2f}")


if __name__ == "__main__":
    asyncio.run(main())
