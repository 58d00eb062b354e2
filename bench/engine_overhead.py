"""What the engine costs its event-loop thread per inference, without any frontend.

``CONCURRENCY`` client tasks on the engine's own loop call ``Server.infer`` in a closed loop
(each sends its next request when its previous one is answered, like perf_analyzer's
concurrency mode) on a batching model, for ``--seconds``. Reported: inferences/s, the
event-loop thread's CPU time per inference (``time.thread_time``: the figure that bounds a
server whose loop thread is saturated; robust to other load on the machine, unlike
throughput), the whole process's CPU per inference and the mean batch size formed.

The default model is the shared harness's ``mlp`` (ONNX, [-1,64] FP32 -> [-1,16], dynamic
batching with 1000 us queue delay, intra_op 2): the inference itself is ~tens of us, so the
figure is the engine's (validation, dynamic batcher, instance hand-off, statistics, response).

    .venv/bin/python bench/engine_overhead.py [--repository /tmp/bench_work/triton_repo]
        [--model mlp] [--concurrency 16] [--seconds 5] [--rounds 3]

Results: bench/RESULTS.md, "Issue 20: engine per-request cost".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor


async def _client(server: Server, model: str, data: np.ndarray, until: float, done: list[int]) -> None:
    while time.monotonic() < until:
        request = InferenceRequest(model_name=model, model_version="",
                                   inputs=[Tensor("INPUT0", "FP32", data)])
        await server.infer(request)
        done[0] += 1


async def _round(server: Server, model: str, concurrency: int, seconds: float) -> dict[str, float]:
    data = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    stats_before = await server.statistics(model, "")
    done = [0]
    wall0, loop0, proc0 = time.monotonic(), time.thread_time(), time.process_time()
    until = wall0 + seconds
    await asyncio.gather(*(_client(server, model, data, until, done) for _ in range(concurrency)))
    wall, loop_cpu, proc = time.monotonic() - wall0, time.thread_time() - loop0, time.process_time() - proc0
    stats_after = await server.statistics(model, "")
    before, after = stats_before["model_stats"][0], stats_after["model_stats"][0]
    executions = after["execution_count"] - before["execution_count"]
    n = done[0]
    return {"infer_per_s": n / wall, "loop_us": 1e6 * loop_cpu / n, "process_us": 1e6 * proc / n,
            "batch": (after["inference_count"] - before["inference_count"]) / max(executions, 1)}


async def main_async(args: argparse.Namespace) -> None:
    options = ServerOptions(model_repository=[args.repository], model_control_mode="explicit",
                            load_model=[args.model])
    async with Server(options) as server:
        await _round(server, args.model, args.concurrency, 1.0)  # warm-up
        rounds = [await _round(server, args.model, args.concurrency, args.seconds) for _ in range(args.rounds)]
    print("| round | infer/s | loop CPU us/inf | process CPU us/inf | batch |")
    print("|---|---:|---:|---:|---:|")
    for i, r in enumerate(rounds, 1):
        print(f"| {i} | {r['infer_per_s']:.0f} | {r['loop_us']:.1f} | {r['process_us']:.1f} | {r['batch']:.1f} |")
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"| median | {med['infer_per_s']:.0f} | {med['loop_us']:.1f} | {med['process_us']:.1f} "
          f"| {med['batch']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", default="/tmp/bench_work/triton_repo")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_async(args))
    else:
        uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
