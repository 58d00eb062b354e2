"""In-process onnxruntime throughput of the sample minilm_encoder ONNX file (the ceiling for serving it).

    .venv/bin/python bench/raw_ort_minilm.py --input-data DIR/minilm_encoder.json [--batches 1,2,4,8,16,32]
        [--seconds 2] [--warmup 0.5] [--threads 2] [--out FILE.json]

Inputs: the rows of bench/make_inputs.py's minilm_encoder.json (real sentences padded to 32 tokens), tiled to
the batch size. One InferenceSession, intra_op_num_threads=2, inter_op 1, sequential, ORT_ENABLE_ALL, ORT's
default thread spinning; every call computes all outputs (sentence_embedding and last_hidden_state, as the
server does when perf_analyzer asks for all outputs). Closed loop, one call at a time, `--seconds` per point
after `--warmup` seconds. Prints infer/s (= sentences/s) and latency per call.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "sample_models", "repository", "minilm_encoder", "1", "model.onnx")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input-data", required=True)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--batches", default="1,2,4,8,16,32")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spinning", default=None, help="session.intra_op.allow_spinning (default: ORT's, on)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    with open(a.input_data) as f:
        rows = json.load(f)["data"]
    base = {k: np.array([r[k] for r in rows], dtype=np.int64)
            for k in ("input_ids", "attention_mask", "token_type_ids")}
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if a.spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", a.spinning)
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    results = []
    for b in (int(x) for x in a.batches.split(",")):
        reps = -(-b // len(rows))
        feed = {k: np.ascontiguousarray(np.tile(v, (reps, 1))[:b]) for k, v in base.items()}
        t_end = time.perf_counter() + a.warmup
        while time.perf_counter() < t_end:
            sess.run(None, feed)
        lat = []
        t0 = time.perf_counter()
        while True:
            s = time.perf_counter()
            sess.run(None, feed)
            e = time.perf_counter()
            lat.append(e - s)
            if e - t0 >= a.seconds and len(lat) >= 3:
                break
        wall = time.perf_counter() - t0
        lat_ms = np.array(lat) * 1e3
        row = {"batch": b, "calls": len(lat), "infer_per_s": len(lat) * b / wall, "mean_ms": float(lat_ms.mean()),
               "p50_ms": float(np.percentile(lat_ms, 50)), "p99_ms": float(np.percentile(lat_ms, 99))}
        results.append(row)
        print(f"minilm_encoder b={b:3d}: {row['infer_per_s']:8.1f} infer/s  mean {row['mean_ms']:8.2f} ms  "
              f"p50 {row['p50_ms']:8.2f}  p99 {row['p99_ms']:8.2f}  ({len(lat)} calls)", flush=True)
    if a.out:
        meta = {"onnxruntime": ort.__version__, "threads": a.threads, "seconds": a.seconds, "warmup": a.warmup,
                "spinning": a.spinning, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": a.model}
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=2)


if __name__ == "__main__":
    main()
