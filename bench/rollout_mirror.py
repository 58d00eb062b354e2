"""What mirroring costs the primary path (issue 32): ``digits_mlp`` v1 serves, v2 is the
candidate; rounds of closed-loop load on the in-process engine (``server.infer``, no HTTP)
alternate mirror 0 % and ``--percent`` (100 %); per round the primary's throughput, p99 latency and the
process CPU time per primary inference (``/proc/self/stat`` utime + stime), then the medians.

    PYTHONPATH=. python bench/rollout_mirror.py [--rounds 6] [--seconds 3] [--concurrency 8] [--cap 4] [--percent 100]

Inputs are the digits test split (``sample_models/build_digits.py``), so the mirror's
agreement (argmax of the logits, v1 vs v2) is printed too. Needs the sample models
(``make setup``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_models"))

from build_digits import load_split  # noqa: E402

from workbench import InferenceRequest, Server, ServerOptions, Tensor  # noqa: E402

MODEL = "digits_mlp"


def cpu_seconds() -> float:
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_round(server: Server, rows: np.ndarray, seconds: float, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def loop(offset: int) -> None:
        i = offset
        while time.monotonic() < stop:
            request = InferenceRequest(MODEL, [Tensor("pixels", "FP32", rows[i % len(rows)][None, :])])
            start = time.perf_counter()
            await server.infer(request)
            latencies.append(time.perf_counter() - start)
            i += concurrency

    cpu, wall = cpu_seconds(), time.monotonic()
    await asyncio.gather(*(loop(k) for k in range(concurrency)))
    await server.rollouts.settle(MODEL)
    cpu, wall = cpu_seconds() - cpu, time.monotonic() - wall
    return {"infer_s": len(latencies) / wall, "p99_us": float(np.percentile(latencies, 99)) * 1e6,
            "cpu_us_per_infer": cpu / len(latencies) * 1e6}


async def main(args: argparse.Namespace) -> None:
    repo = Path(tempfile.mkdtemp(prefix="rollout_mirror_"))
    shutil.copytree(ROOT / "sample_models" / "repository" / MODEL, repo / MODEL)
    rows = load_split().x_test
    results: dict[float, list[dict[str, float]]] = {0: [], args.percent: []}
    async with Server(ServerOptions(model_repository=[str(repo)])) as server:
        await server.rollouts.set(MODEL, {1: 1})
        await one_round(server, rows, 1.0, args.concurrency)  # warm-up
        for _ in range(args.rounds):
            for percent in results:
                if percent:
                    await server.rollouts.set(MODEL, {1: 1}, candidate=2, mirror_percent=percent,
                                              mirror_max_in_flight=args.cap)
                else:
                    await server.rollouts.set(MODEL, {1: 1})
                results[percent].append(await one_round(server, rows, args.seconds, args.concurrency))
        await server.rollouts.set(MODEL, {1: 1}, candidate=2, mirror_percent=args.percent,
                                  mirror_max_in_flight=args.cap)
        await one_round(server, rows, args.seconds, args.concurrency)
        report = (await server.rollouts.get(MODEL))["mirror"]
    shutil.rmtree(repo)
    print(f"c={args.concurrency}, {args.rounds} rounds x {args.seconds} s per setting, cap {args.cap}")
    print("| mirror | infer/s (median) | p99 µs (median) | CPU µs / primary infer (median) | rounds infer/s |")
    print("|---|---|---|---|---|")
    for percent, rounds in results.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        each = ", ".join(f"{r['infer_s']:.0f}" for r in rounds)
        print(f"| {percent:g} % | {med['infer_s']:.0f} | {med['p99_us']:.0f} | {med['cpu_us_per_infer']:.1f} "
              f"| {each} |")
    print(f"last mirror round: mirrored {report['mirrored']}, shed {report['shed']}, "
          f"errors {report['candidate_errors']}, latency µs {report['latency_us']}, "
          f"agreement {report['agreement']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--percent", type=float, default=100.0)
    asyncio.run(main(parser.parse_args()))
