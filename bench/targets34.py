"""Issue 34's targets 1-4 in one run: Triton 2.51, workbench with grpc.aio, workbench with the native gRPC front end.

    flock /tmp/bench.lock python3 bench/targets34.py [--rounds 3] [--models mlp,identity,minilm]
        [--interval 3000] [--windows 3] [--port-base 19700] [--triton-port-base 19750] [--out DIR]

Three servers are started once and stay up for the whole run, every one with the same models loaded:

* ``T``: the real tritonserver 2.51 (``../shared/bench/tritonserver.sh``, nvidia-pytriton's build, python backend
  only) on ``$BENCH_WORK/triton_py_repo`` (mlp and minilm run the same ONNX files through onnxruntime inside its
  python-backend stub; identity is ``../shared/bench/peers/triton_python_identity_model.py``);
* ``P``: ``workbench serve --grpc-frontend=python`` of this tree (grpc.aio on the engine's loop) on
  ``$BENCH_WORK/triton_repo`` (our onnxruntime backend) plus a copy of Triton's identity folder (our Python
  backend, its stub process);
* ``N``: the same with ``--grpc-frontend=native`` (grpc++ on C++ threads; the HTTP port is the same uvicorn path as
  ``P``'s, so HTTP is measured on ``T`` and ``P`` only);
* ``X`` and ``Y`` (with ``--other-tree TREE``, once or twice; gRPC only): ``N`` served from other source trees
  (``PYTHONPATH=TREE``, its ``_native_grpc`` extension built there): changes measured against ``N`` in one run.

Every round: the machine-speed probe of bench/vs_triton.py (raw onnxruntime mlp and minilm at batch 1 in-process,
numpy 64 MiB copy), in-process onnxruntime on minilm at batch 1,4,8,16,32 (the ceiling of target 4), then per
model and protocol each server in turn, the order rotating every round (T P N, P N T, N T P). One measurement is
vs_triton.py's perf_analyzer 2.41 run (``-b 1``, c=16, warm-up windows of 1 s, then ``--windows`` windows of
``--interval`` ms; HTTP with binary tensors both ways). Around the recorded run every thread of the measured
server's process group is read from ``/proc`` (utime + stime) with the model's ``inference_count`` and
``execution_count``; per inference: all threads, the main thread of the server process (workbench: the engine's
asyncio loop; tritonserver: its idle main thread), the child processes (python-backend stubs), the busiest thread
(and its name). The idle servers' CPU over the same run is recorded too (it should be ~0).

Output (--out, default $BENCH_WORK/results/targets34-<UTC>): results.json (as it goes), tables.md (per target:
per-round infer/s, p99, the ratio to T inside each round, medians; CPU tables), r<N>/ perf_analyzer files.
Standard library only (python3 >= 3.10). Timing is never pass/fail: the tables say which target the medians meet.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: the side-by-side runner's servers, perf_analyzer run and probes, loaded from this folder
vt: Any = importlib.import_module("vs_triton")
proc_cpu: Any = importlib.import_module("proc_cpu")

LABELS = {"T": "Triton 2.51", "P": "workbench, grpc.aio", "N": "workbench, native gRPC",
          "X": "workbench, native gRPC, first --other-tree", "Y": "workbench, native gRPC, second --other-tree"}
OTHERS = ("X", "Y")
#: which servers are measured on a protocol (N's and X's HTTP port is P's path)
ON_PROTOCOL = {"http": ("T", "P"), "grpc": ("T", "P", "N", "X", "Y")}


def counts(http_port: int, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of ``model`` summed over its versions."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats", timeout=10) as r:
        rows = json.load(r).get("model_stats", [])
    return sum(int(s.get("inference_count", 0)) for s in rows), sum(int(s.get("execution_count", 0)) for s in rows)


def snapshot(pgid: int) -> dict[tuple[int, int], tuple[str, float]]:
    return dict(proc_cpu.group_thread_cpu_s(pgid))


def cpu_split(pgid: int, before: dict, after: dict, n: int) -> dict[str, Any]:
    """µs per inference: all threads, the server process's main thread, its child processes, the busiest thread."""
    deltas = {k: (name, cpu - before.get(k, (name, 0.0))[1]) for k, (name, cpu) in after.items()}
    total = sum(d for _, d in deltas.values())
    main = sum(d for (pid, tid), (_, d) in deltas.items() if pid == pgid and tid == pgid)
    kids = sum(d for (pid, _), (_, d) in deltas.items() if pid != pgid)
    (bpid, _), (bname, bcpu) = max(deltas.items(), key=lambda kv: kv[1][1])
    return {"all_us": total / n * 1e6, "main_us": main / n * 1e6, "stub_us": kids / n * 1e6,
            "busiest_us": bcpu / n * 1e6, "busiest": f"{bname}{'' if bpid == pgid else ' (child)'}"}


def group_total(pgid: int) -> float:
    return sum(cpu for _, cpu in proc_cpu.group_thread_cpu_s(pgid).values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,identity,minilm")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--servers", default="T,P,N", help="T, P, N; X and Y: --other-tree")
    ap.add_argument("--other-tree", action="append", default=[],
                    help="a source tree served as X (the second as Y), native gRPC")
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--interval", type=int, default=3000)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--raw-batches", default="1,4,8,16,32")
    ap.add_argument("--raw-seconds", type=float, default=2.0)
    ap.add_argument("--port-base", type=int, default=19700, help="P: base..base+2, N: base+10..base+12")
    ap.add_argument("--triton-port-base", type=int, default=19750)
    ap.add_argument("--ours-cmd", default=None, help="default: vs_triton.py's (this tree, its venv)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    models, protos, labels = a.models.split(","), a.protocols.split(","), a.servers.split(",")
    out = Path(a.out or vt.WORK / "results" / time.strftime("targets34-%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    vt.ensure_harness()
    ours = a.ours_cmd or vt.default_ours_cmd()
    py_repo = vt.python_identity_repo(out)
    ports = {"T": (a.triton_port_base, a.triton_port_base + 1, a.triton_port_base + 2),
             "P": (a.port_base, a.port_base + 1, a.port_base + 2),
             "N": (a.port_base + 10, a.port_base + 11, a.port_base + 12),
             "X": (a.port_base + 20, a.port_base + 21, a.port_base + 22),
             "Y": (a.port_base + 30, a.port_base + 31, a.port_base + 32)}
    for label in labels:
        busy = [p for p in ports[label] if vt.port_busy(p)]
        if busy:
            raise SystemExit(f"port(s) {busy} in use ({label})")
    commands = {"T": vt.server_command("triton", ports["T"], models, ours, py_repo),
                "P": vt.server_command("workbench", ports["P"], models, ours + " --grpc-frontend=python", py_repo),
                "N": vt.server_command("workbench", ports["N"], models, ours + " --grpc-frontend=native", py_repo)}
    for label, tree in zip(OTHERS, a.other_tree, strict=False):
        other = re.sub(r"PYTHONPATH=\S+", f"PYTHONPATH={Path(tree).resolve()}", ours)
        commands[label] = vt.server_command("workbench", ports[label], models, other + " --grpc-frontend=native",
                                            py_repo)
    if any(x in labels and x not in commands for x in OTHERS):
        raise SystemExit("servers X and Y need one --other-tree each")
    res: dict[str, Any] = {"meta": {"start_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                                    "machine": vt.machine(), "code": vt.code_version(ours), "argv": sys.argv[1:],
                                    "commands": commands, "loadavg_start": vt.loadavg()},
                           "rounds": []}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(res, indent=1))

    servers = {label: vt.Server(label, commands[label], ports[label][0], models, out / f"{label}.server.log")
               for label in labels}
    try:
        for srv in servers.values():
            srv.start()
        pg = {label: srv.proc.pid for label, srv in servers.items()}
        for r in range(1, a.rounds + 1):
            rdir = out / f"r{r}"
            rdir.mkdir(exist_ok=True)
            vt.log(f"round {r}/{a.rounds}: probe")
            rnd: dict[str, Any] = {"round": r, "probe": vt.machine_probe(rdir), "measurements": []}
            res["rounds"].append(rnd)
            if "minilm" in models:
                rnd["raw_ort_minilm"] = vt.raw_ort_minilm(rdir, a.raw_batches, a.raw_seconds)
            save()
            for model in models:
                for proto in protos:
                    order = [x for x in labels if x in ON_PROTOCOL[proto]]
                    shift = (r - 1) % len(order)
                    for label in order[shift:] + order[:shift]:
                        port = ports[label][1 if proto == "grpc" else 0]
                        http = ports[label][0]
                        c0, e0 = counts(http, model)
                        s0 = snapshot(pg[label])
                        idle0 = {x: group_total(p) for x, p in pg.items() if x != label}
                        rec = vt.measure(rdir, label, model, proto, a.conc, port, a)
                        idle1 = {x: group_total(p) for x, p in pg.items() if x != label}
                        s1 = snapshot(pg[label])
                        c1, e1 = counts(http, model)
                        n = max(c1 - c0, 1)
                        rec.update(inferences=c1 - c0, batch=(c1 - c0) / max(e1 - e0, 1),
                                   idle_others_cpu_s=sum(idle1[x] - idle0[x] for x in idle0),
                                   **cpu_split(pg[label], s0, s1, n))
                        vt.log(f"  {label} {model} {proto}: all {rec['all_us']:.0f} µs/inf, main "
                               f"{rec['main_us']:.0f}, children {rec['stub_us']:.0f}, batch {rec['batch']:.1f}, "
                               f"idle others {rec['idle_others_cpu_s']:.2f} s")
                        rnd["measurements"].append(rec)
                        save()
    finally:
        for srv in servers.values():
            srv.stop()
    res["meta"]["end_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    res["meta"]["loadavg_end"] = vt.loadavg()
    save()
    text = tables(res)
    (out / "tables.md").write_text(text)
    print(text)
    vt.log(f"wrote {out / 'tables.md'}")
    return 0


def tables(res: dict[str, Any]) -> str:
    """Per (model, protocol): per-round infer/s, p99, ratio to T; medians; CPU per inference."""
    med = statistics.median
    meta, rounds = res["meta"], res["rounds"]
    md = [f"{meta['start_utc']} – {meta.get('end_utc', '?')} UTC; {meta['machine']}; load "
          f"{meta.get('loadavg_start')} → {meta.get('loadavg_end', '?')}; {meta['code']}", ""]
    keys: list[tuple[str, str]] = []
    for rnd in rounds:
        for m in rnd["measurements"]:
            if (m["model"], m["proto"]) not in keys:
                keys.append((m["model"], m["proto"]))
    for model, proto in keys:
        md += [f"### {model}, {vt.PROTOCOLS[proto]}, c=16", "",
               "| server | infer/s per round | median | ratio to T per round | ratio median | p99 ms median | "
               "p99 ratio median | batch | CPU µs/inf all threads (rounds) | median | main (loop) thread (rounds) | "
               "median | children (stubs) |",
               "|---|---|---:|---|---:|---:|---:|---:|---|---:|---|---:|---:|"]
        per: dict[str, list[dict[str, Any] | None]] = {}
        for rnd in rounds:
            for m in rnd["measurements"]:
                if (m["model"], m["proto"]) == (model, proto):
                    per.setdefault(m["server"], [None] * len(rounds))[rnd["round"] - 1] = m
        t = per.get("T", [None] * len(rounds))
        for label, recs in per.items():
            ok = [m for m in recs if m and m.get("ok")]
            if not ok:
                md.append(f"| {label} | FAILED | | | | | | | | | | | |")
                continue
            ratios = [m["infer_per_s"] / tt["infer_per_s"] for m, tt in zip(recs, t, strict=True)
                      if m and m.get("ok") and tt and tt.get("ok")]
            p99r = [m["p99_ms"] / tt["p99_ms"] for m, tt in zip(recs, t, strict=True)
                    if m and m.get("ok") and tt and tt.get("ok")]
            per_round = " / ".join(format(m["infer_per_s"], ".0f") if m and m.get("ok") else "-" for m in recs)
            md.append(
                f"| {LABELS[label]} | {per_round}"
                f" | {med(m['infer_per_s'] for m in ok):.0f} | {' / '.join(f'{x:.2f}' for x in ratios)} | "
                f"{vt.cell(vt.med(ratios), 2)} | {med(m['p99_ms'] for m in ok):.2f} | {vt.cell(vt.med(p99r), 2)} | "
                f"{med(m['batch'] for m in ok):.1f} | {' / '.join(format(m['all_us'], '.0f') for m in ok)} | "
                f"{med(m['all_us'] for m in ok):.0f} | {' / '.join(format(m['main_us'], '.0f') for m in ok)} | "
                f"{med(m['main_us'] for m in ok):.0f} | {med(m['stub_us'] for m in ok):.0f} |")
        md.append("")
    md += ["### Probe per round", "",
           "| round | time UTC | loadavg | raw ORT mlp b1 infer/s | raw ORT minilm b1 | numpy copy GB/s | "
           "raw ORT minilm per batch |", "|---|---|---|---:|---:|---:|---|"]
    for rnd in rounds:
        p = rnd.get("probe", {})
        rom = rnd.get("raw_ort_minilm") or {}
        per_batch = ", ".join(f"b{b}: {v:.1f}" for b, v in (rom.get("per_batch") or {}).items()) or "-"
        md.append(f"| {rnd['round']} | {p.get('time_utc', '-')} | {p.get('loadavg', '-')} | "
                  f"{p.get('mlp_b1', 0):.0f} | {p.get('minilm_b1', 0):.1f} | {p.get('numpy_copy_gb_per_s', 0):.2f} | "
                  f"{per_batch} |")
    if any(rnd.get("raw_ort_minilm") for rnd in rounds):
        md += ["", "minilm vs in-process onnxruntime at its best batch (per round: server infer/s / raw best):", ""]
        for label in LABELS:
            xs = []
            for rnd in rounds:
                best = (rnd.get("raw_ort_minilm") or {}).get("best")
                hit = [m for m in rnd["measurements"] if m["server"] == label and m["model"] == "minilm"
                       and m.get("ok")]
                xs += [f"{m['proto']} {m['infer_per_s'] / best:.2f}" for m in hit if best]
            if xs:
                md.append(f"* {LABELS[label]}: {', '.join(xs)}")
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
