"""The tuner's quick search against its brute force, on one model, in one sitting.

Model Analyzer documents its quick search as reaching > 95 % of brute force's optimum from
< 10 % of the space. This measures the same two numbers for ``workbench tune``'s quick
search: rounds alternate the order (brute then quick, quick then brute), each on a fresh
in-process engine over a temporary copy of the model, with the same space, levels and SLA.

Per run: points measured (and windows), wall time, the recommended setting and its
throughput under the SLA. The quality figure is fair to noise: the quick search's pick is
looked up in the *same round's* brute-force results (its best stable point under the SLA
there) and divided by brute force's best in that round.

    python bench/tune_quick_vs_brute.py --model digits_mlp --sla-ms 5 \
        --space "instance_count=1,2 max_batch_size=4,16,64 max_queue_delay_us=0,500" \
        --levels 1:16 --rounds 2

Writes ``bench/results/tune-quick-vs-brute-<UTC>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import Server, ServerOptions  # noqa: E402
from workbench.tuning import SpeedProbe, TuneResult, tune  # noqa: E402
from workbench.tuning.decide import best_point  # noqa: E402


async def one_run(repo: Path, model: str, strategy: str, args: argparse.Namespace) -> TuneResult:
    server = Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit", load_model=[model]))
    await server.start()
    try:
        return await tune(server, model, strategy=strategy, space=args.space, levels=args.levels,
                          sla_ms=args.sla_ms, measurement_interval_ms=args.window_ms, warmup_ms=args.warmup_ms,
                          stability_percentage=args.stability, progress=False)
    finally:
        await server.stop()


def chosen_or_best(result: TuneResult):
    """The recommended point, or (nothing to apply) the best stable point under the goals."""
    return result.chosen or best_point(result.points, result.goals, result.memory_mb)


def figures(result: TuneResult, wall: float, probe: SpeedProbe) -> dict:
    """One run's columns."""
    pick = chosen_or_best(result)
    return {"points": result.measurements, "windows": result.windows, "wall_s": round(wall, 1),
            "probe_kloops": round(probe.kloops_per_s), "loadavg": probe.loadavg_1m,
            "pick": None if pick is None else pick.setting.label,
            "pick_throughput": None if pick is None else round(pick.throughput, 1), "why": result.decision.why}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="digits_mlp")
    parser.add_argument("--repository", default=str(ROOT / "sample_models" / "repository"))
    parser.add_argument("--space", default="instance_count=1,2 max_batch_size=4,16,64 max_queue_delay_us=0,500")
    parser.add_argument("--levels", default="1:16")
    parser.add_argument("--sla-ms", type=float, default=5.0)
    parser.add_argument("--window-ms", type=int, default=1000)
    parser.add_argument("--warmup-ms", type=int, default=300)
    parser.add_argument("--stability", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tune-bench-"))
    rows = []
    try:
        shutil.copytree(Path(args.repository) / args.model, work / args.model)
        for r in range(args.rounds):
            order = ("brute", "quick") if r % 2 == 0 else ("quick", "brute")
            runs = {}
            for strategy in order:
                probe = SpeedProbe.take()
                started = time.monotonic()
                result = await one_run(work, args.model, strategy, args)
                runs[strategy] = (result, time.monotonic() - started, probe)
                print(f"round {r + 1} {strategy}: {result.measurements} points in {result.wall_s:.0f} s; "
                      f"{result.decision.why[:160]}", file=sys.stderr, flush=True)
            brute, quick = runs["brute"][0], runs["quick"][0]
            brute_best = best_point(brute.points, brute.goals, brute.memory_mb)
            pick = chosen_or_best(quick)
            in_brute = (best_point([p for p in brute.points if pick is not None and p.setting == pick.setting],
                                   brute.goals, brute.memory_mb) if pick is not None else None)
            ratio = (in_brute.throughput / brute_best.throughput
                     if in_brute is not None and brute_best is not None else None)
            rows.append({
                "round": r + 1, "order": list(order),
                "space_settings": len(brute.space.settings()), "levels": len(brute.space.levels),
                **{f"{s}_{k}": v for s, run in runs.items() for k, v in figures(*run).items()},
                "quick_pick_in_brute_throughput": None if in_brute is None else round(in_brute.throughput, 1),
                "brute_best_throughput": None if brute_best is None else round(brute_best.throughput, 1),
                "quick_vs_brute_optimum": None if ratio is None else round(ratio, 3),
            })
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or ROOT / "bench" / "results" / f"tune-quick-vs-brute-{stamp}.json")
    out.write_text(json.dumps({"args": vars(args), "cores": len(os.sched_getaffinity(0)), "rows": rows}, indent=1))
    print("| round | space | brute points / s | quick points / s | brute best infer/s | quick pick | "
          "quick pick in brute's round | quick / brute optimum |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['round']} ({'→'.join(row['order'])}) | {row['space_settings']} × {row['levels']} | "
              f"{row['brute_points']} / {row['brute_wall_s']} | {row['quick_points']} / {row['quick_wall_s']} | "
              f"{row['brute_best_throughput']} | {row['quick_pick']} | {row['quick_pick_in_brute_throughput']} | "
              f"{row['quick_vs_brute_optimum']} |")
    ratios = [r["quick_vs_brute_optimum"] for r in rows if r["quick_vs_brute_optimum"] is not None]
    if ratios:
        share = statistics.median(r["quick_points"] / r["brute_points"] for r in rows)
        print(f"\nmedian quick/brute optimum {statistics.median(ratios):.3f}, "
              f"median share of brute's points {share:.2f}")
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
