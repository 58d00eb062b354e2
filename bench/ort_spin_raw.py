"""In-process ONNX Runtime, thread-spinning variants, alternating inside one run (issue 20, target 2).

    flock /tmp/bench.lock /work/main/.venv/bin/python bench/ort_spin_raw.py [--model minilm]
        [--batches 1,4,8,16,32] [--variants on,off] [--rounds 3] [--seconds 2] [--out FILE.json]

One session per variant on the harness's ONNX file ($BENCH_WORK/triton_repo/<model>/1/model.onnx), the harness's
settings (intra_op 2, inter_op 1, sequential, ORT_ENABLE_ALL) and the harness's input rows
($BENCH_WORK/data/<model>.json, tiled to the batch); the variants (:data:`VARIANTS`) differ only in ORT session
config entries: ``on`` = ORT's default (``session.intra_op.allow_spinning`` 1), ``off`` = 0, ``stop`` = on plus
``session.force_spinning_stop`` 1 (spin during a run, stop when it returns). Every round measures, per batch
size, every variant (the order rotates every round), each a closed loop of --seconds after a short warm-up.
Also per point: the process CPU time per wall second (``cpu/s``; 2.0 = both cores busy), which shows what
spinning burns. Prints a table of medians; writes every point to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench_work"))
#: variant -> ORT session config entries
VARIANTS = {
    "on": {"session.intra_op.allow_spinning": "1"},
    "off": {"session.intra_op.allow_spinning": "0"},
    "stop": {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"},
}


def feed_for(model: str, batch: int) -> dict[str, np.ndarray]:
    """The harness's input rows for ``model`` tiled to ``batch`` rows (int64 / fp32, C-contiguous)."""
    rows = json.loads((WORK / "data" / f"{model}.json").read_text())["data"]
    names = list(rows[0])
    out = {}
    for name in names:
        arr = np.array([r[name]["content"] for r in rows])
        arr = arr.astype(np.int64 if model == "minilm" else np.float32)
        reps = -(-batch // len(arr))
        out[name] = np.ascontiguousarray(np.tile(arr, (reps, 1))[:batch])
    return out


def session(model: str, variant: str, threads: int) -> ort.InferenceSession:
    """A session with the harness's settings and the variant's config entries."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for key, value in VARIANTS[variant].items():
        so.add_session_config_entry(key, value)
    path = WORK / "triton_repo" / model / "1" / "model.onnx"
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def point(sess: ort.InferenceSession, feed: dict[str, np.ndarray], seconds: float) -> dict[str, float]:
    """Closed loop for ``seconds`` after a 0.3 s warm-up: rows/s, ms per call, process CPU s per wall s."""
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        sess.run(None, feed)
    calls = 0
    c0, t0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds or calls < 3:
        sess.run(None, feed)
        calls += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    batch = next(iter(feed.values())).shape[0]
    return {"infer_per_s": calls * batch / wall, "ms_per_call": wall / calls * 1e3, "cpu_per_s": cpu / wall}


def main() -> None:
    """Run the rounds and print the medians (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batches", default="1,4,8,16,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="on,off", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    variants = a.variants.split(",")
    sessions = {v: session(a.model, v, a.threads) for v in variants}
    feeds = {b: feed_for(a.model, b) for b in batches}
    points: list[dict] = []
    for r in range(a.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for b in batches:
            for v in order:
                p = {"round": r + 1, "batch": b, "variant": v, "time_utc": time.strftime("%H:%M:%S", time.gmtime()),
                     **point(sessions[v], feeds[b], a.seconds)}
                points.append(p)
                print(json.dumps(p), flush=True)
    print(f"\n{a.model}, intra_op {a.threads}, {a.rounds} rounds x {a.seconds} s, medians")
    print("| batch | " + " | ".join(f"{v} infer/s" for v in variants) + " | "
          + " | ".join(f"{v}/{variants[0]}" for v in variants[1:]) + " | "
          + " | ".join(f"{v} cpu/s" for v in variants) + " |")
    print("|---:|" + "---:|" * (3 * len(variants) - 1))
    for b in batches:
        def med(v: str, key: str, b: int = b) -> float:
            return statistics.median(p[key] for p in points if p["batch"] == b and p["variant"] == v)
        tput = [med(v, "infer_per_s") for v in variants]
        print(f"| {b} | " + " | ".join(f"{t:.1f}" for t in tput) + " | "
              + " | ".join(f"{t / tput[0]:.2f}" for t in tput[1:]) + " | "
              + " | ".join(f"{med(v, 'cpu_per_s'):.2f}" for v in variants) + " |")
    if a.out:
        Path(a.out).write_text(json.dumps({"model": a.model, "threads": a.threads, "points": points}, indent=1))


if __name__ == "__main__":
    main()
