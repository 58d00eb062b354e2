"""Dynamic-batching sweep: one model, one batching config, several concurrencies, with the batch size it ran at.

    .venv/bin/python bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder \
        --batching none|asis|delay=N[,pref=A:B] --conc 1,4,16,32 --out DIR --label LABEL \
        --input-data FILE [--pa-arg=--shape --pa-arg=input_ids:32 ...] [--interval 3000] [--windows 3]

Copies the model folder into DIR/<label>/repo/ and edits only its config.pbtxt:
  none      removes the `dynamic_batching { ... }` block (direct scheduler, one request per execution)
  asis      keeps the config as it is
  delay=N   replaces it with `dynamic_batching { max_queue_delay_microseconds: N }`
            (`,pref=A:B` adds `preferred_batch_size: [ A, B ]`)
--instance-count N / --intra-op N also set instance_group count / parameters intra_op_thread_count;
--param KEY=VALUE adds a config `parameters` entry (e.g. session.intra_op.allow_spinning=1).
Starts `workbench serve` on it (127.0.0.1:$PORT, metrics off), one warm-up perf_analyzer run at the highest
concurrency (1 s windows, not recorded), then for each concurrency one perf_analyzer run
(HTTP, binary tensors, -b 1, time_windows, -s 999 -r WINDOWS -p INTERVAL), reading GET /v2/models/<m>/stats
before and after it: average batch = delta inference_count / delta execution_count (this includes the
perf_analyzer's ramp-up/drain requests around the windows). Writes DIR/<label>/points.json and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PA = os.environ.get("PERF_ANALYZER", "/tmp/bench_bin/perf_analyzer")
WORKBENCH = os.path.join(ROOT, ".venv", "bin", "workbench")


def edit_config(text: str, batching: str) -> str:
    text = re.sub(r"^\s*#.*\n(?=\s*dynamic_batching)", "", text, flags=re.M)  # its comment line, if any
    text = re.sub(r"dynamic_batching\s*\{[^}]*\}\s*\n?", "", text)
    if batching == "none":
        return text
    m = re.fullmatch(r"delay=(\d+)(?:,pref=([\d:]+))?", batching)
    if not m:
        raise SystemExit(f"bad --batching {batching}")
    body = f"max_queue_delay_microseconds: {m.group(1)}"
    if m.group(2):
        body = f"preferred_batch_size: [ {', '.join(m.group(2).split(':'))} ] " + body
    return text.rstrip("\n") + f"\ndynamic_batching {{ {body} }}\n"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def counts(port: int, model: str) -> tuple[int, int, dict[int, list[int]]]:
    """inference_count, execution_count and, per batch size, [executions, compute_infer ns] (summed over versions)."""
    s = get_json(f"http://127.0.0.1:{port}/v2/models/{model}/stats")
    hist: dict[int, list[int]] = {}
    for v in s["model_stats"]:
        for b in v.get("batch_stats", []):
            h = hist.setdefault(int(b["batch_size"]), [0, 0])
            h[0] += int(b["compute_infer"]["count"])
            h[1] += int(b["compute_infer"]["ns"])
    return (sum(int(v.get("inference_count", 0)) for v in s["model_stats"]),
            sum(int(v.get("execution_count", 0)) for v in s["model_stats"]), hist)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src-repo", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batching", default="asis")
    ap.add_argument("--conc", default="1,4,16,32")
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--input-data", required=True)
    ap.add_argument("--pa-arg", action="append", default=[])
    ap.add_argument("--interval", type=int, default=3000)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--instance-count", type=int, default=None, help="set instance_group count")
    ap.add_argument("--intra-op", type=int, default=None, help="set parameters intra_op_thread_count")
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE: add a config parameters entry")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    a = ap.parse_args()
    conc = [int(c) for c in a.conc.split(",")]
    base = os.path.join(a.out, a.label)
    repo = os.path.join(base, "repo")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(repo)
    shutil.copytree(os.path.join(a.src_repo, a.model), os.path.join(repo, a.model))
    cfg = os.path.join(repo, a.model, "config.pbtxt")
    with open(cfg) as f:
        text = f.read()
    if a.batching != "asis":
        text = edit_config(text, a.batching)
    if a.instance_count is not None:
        text = re.sub(r"count:\s*\d+", f"count: {a.instance_count}", text, count=1)
    if a.intra_op is not None:
        text = re.sub(r'parameters\s*\{\s*key:\s*"intra_op_thread_count"[^\n]*\n', "", text)
        text += f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{a.intra_op}" }} }}\n'
    for kv in a.param:
        key, value = kv.split("=", 1)
        text += f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    with open(cfg, "w") as f:
        f.write(text)
    with open(cfg) as f:
        config_text = f.read()

    cmd = [WORKBENCH, "serve", f"--model-repository={repo}", "--http-address=127.0.0.1",
           f"--http-port={a.port}", "--metrics-port=0", "--allow-metrics=false"]
    with open(os.path.join(base, "server.log"), "w") as log:  # the server holds its own copy of the file
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    points = []
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{a.port}/v2/models/{a.model}/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None:
                raise SystemExit(f"server exited, see {base}/server.log")
            time.sleep(0.5)
        else:
            raise SystemExit("server not ready")

        def pa(c: int, interval: int, extra: list[str]) -> list[str]:
            return [PA, "-m", a.model, "-u", f"localhost:{a.port}", "-i", "http", *a.pa_arg, "-b", "1",
                    "--input-data", a.input_data, "--percentile", "99", "--measurement-mode", "time_windows",
                    "-p", str(interval), "-s", "999", "-r", str(a.windows), "--concurrency-range", str(c), *extra]

        subprocess.run(pa(max(conc), 1000, []), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180)
        for c in conc:
            stem = os.path.join(base, f"c{c}")
            cmd_pa = pa(c, a.interval, ["-f", stem + ".csv", "--verbose-csv", "-v"])
            with open(stem + ".cmd", "w") as f:
                f.write(" ".join(cmd_pa) + "\n")
            i0, e0, h0 = counts(a.port, a.model)
            t0 = time.strftime("%H:%M:%S")
            with open(stem + ".log", "w") as f:
                rc = subprocess.run(cmd_pa, stdout=f, stderr=subprocess.STDOUT, timeout=240).returncode
            i1, e1, h1 = counts(a.port, a.model)
            row = {"label": a.label, "model": a.model, "batching": a.batching, "conc": c, "rc": rc, "start": t0,
                   "inferences": i1 - i0, "executions": e1 - e0,
                   "avg_batch": (i1 - i0) / (e1 - e0) if e1 > e0 else None,
                   # batch size -> [executions, mean compute_infer ms of one execution]
                   "batch_hist": {k: [h1[k][0] - h0.get(k, [0, 0])[0],
                                      round((h1[k][1] - h0.get(k, [0, 0])[1]) / 1e6
                                            / (h1[k][0] - h0.get(k, [0, 0])[0]), 2)]
                                  for k in sorted(h1) if h1[k][0] > h0.get(k, [0, 0])[0]}}
            try:
                with open(stem + ".csv") as f:
                    last = list(csv.DictReader(f))[-1]
                row.update({"infer_s": float(last["Inferences/Second"]),
                            "p50_ms": float(last["p50 latency"]) / 1000, "p99_ms": float(last["p99 latency"]) / 1000,
                            "queue_ms": float(last["Server Queue"]) / 1000,
                            "infer_ms": float(last["Server Compute Infer"]) / 1000,
                            "cin_ms": float(last["Server Compute Input"]) / 1000,
                            "cout_ms": float(last["Server Compute Output"]) / 1000})
            except (OSError, IndexError, KeyError, ValueError) as exc:
                row["error"] = repr(exc)
            with open(stem + ".log") as f:
                row["windows"] = re.findall(r"throughput: ([\d.]+) infer/sec", f.read())
            points.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    with open(os.path.join(base, "points.json"), "w") as f:
        json.dump({"config": config_text, "server_cmd": cmd, "points": points}, f, indent=2)
    print(f"| {a.label} | conc | infer/s | p50 ms | p99 ms | avg batch | queue ms | compute infer ms |")
    for r in points:
        print(f"| {a.label} | {r['conc']} | {r.get('infer_s', 0):.1f} | {r.get('p50_ms', 0):.2f} | "
              f"{r.get('p99_ms', 0):.2f} | {r['avg_batch'] or 0:.2f} | {r.get('queue_ms', 0):.2f} | "
              f"{r.get('infer_ms', 0):.2f} |")
    return 0 if all(r["rc"] == 0 and "error" not in r for r in points) else 1


if __name__ == "__main__":
    sys.exit(main())
