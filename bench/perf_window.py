"""How far ``workbench perf``'s measurement windows overshoot the interval asked for.

    .venv/bin/python bench/perf_window.py [--steps 20] [--interval-ms 300] [--concurrency 1 4]

Runs ``--steps`` steps per concurrency of ``workbench.perf.run_step`` on ``digits_mlp``
(the in-process engine on the sample repository, explicit mode) and prints one markdown
table of ``window_s - interval`` in milliseconds (min / p50 / p99 / max) per concurrency.
The window is the time between the two clock readings around the load's run, so the
overshoot is the event loop's lateness in waking the step; on a busy machine it grows. A
timing, not a pass/fail property: tests/tools/test_perf.py checks only that each window lasts at
least the interval and leaves out its warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

from workbench import Server, ServerOptions
from workbench.perf import InProcessClient, LoadLevel, PerfOptions, prepare_workload, run_step

REPOSITORY = Path(__file__).resolve().parents[1] / "sample_models" / "repository"


async def main(steps: int, interval_ms: int, concurrencies: list[int]) -> None:
    options = ServerOptions(model_repository=[str(REPOSITORY)], model_control_mode="explicit",
                            load_model=["digits_mlp"])
    async with Server(options) as server:
        client = InProcessClient(server)
        perf = PerfOptions("digits_mlp", measurement_interval_ms=interval_ms, warmup_ms=50, seed=7)
        workload = await prepare_workload(client, perf)
        print("| concurrency | steps | overshoot min ms | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|")
        for concurrency in concurrencies:
            over = []
            for _ in range(steps):
                result = await run_step(client, workload, LoadLevel.concurrency(concurrency), perf)
                over.append((result.window_s - interval_ms / 1000) * 1000)
            over.sort()
            p99 = over[min(len(over) - 1, round(0.99 * (len(over) - 1)))]
            print(f"| {concurrency} | {steps} | {over[0]:.2f} | {statistics.median(over):.2f} | "
                  f"{p99:.2f} | {over[-1]:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--interval-ms", type=int, default=300)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.interval_ms, args.concurrency))
