"""workbench's two gRPC front ends (python = grpc.aio, native = C++) next to the real Triton, alternating in one run.

    flock /tmp/bench.lock python3 bench/grpc_frontends.py [--rounds 3] [--model mlp] [--conc 16] [--out DIR]

Every round: the machine-speed probe of bench/vs_triton.py, then Triton 2.51, workbench with
``--grpc-frontend=python`` and workbench with ``--grpc-frontend=native`` (the order rotates each round), each
started, measured with vs_triton.py's perf_analyzer run over gRPC (warm-up + recorded windows), stopped.
Around each measurement every thread of the server's process group is read from /proc (utime + stime)
and the model's ``inference_count`` from the server's statistics; CPU µs per inference is reported for
all threads and for the server's main thread (workbench: the engine's asyncio loop; Triton: its main
thread, idle while serving). Standard library only; results.json and tables.md under --out
(default $BENCH_WORK/results/grpc-frontends-<UTC>).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: the side-by-side runner's servers, perf_analyzer command and probe, loaded from this folder
vt: Any = importlib.import_module("vs_triton")
proc_cpu: Any = importlib.import_module("proc_cpu")

VARIANTS = ("triton", "python", "native")


def group_cpu(pgid: int) -> tuple[float, float]:
    """(CPU seconds of every thread of every process in process group ``pgid``, of the main
    thread of its ``workbench`` or ``tritonserver`` process)."""
    total, main = 0.0, 0.0
    for (pid, tid), (name, cpu) in proc_cpu.group_thread_cpu_s(pgid).items():
        total += cpu
        if tid == pid and name in ("workbench", "tritonserver"):
            main = cpu
    return total, main


def inference_count(http_port: int, model: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)
    return sum(int(s.get("inference_count", 0)) for s in stats.get("model_stats", []))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--interval", type=int, default=3000)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--ports", default="19400,19401,19402", help="http,grpc,metrics (each server in turn)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="triton, python, native, or nativeN (native with --grpc-native-threads=N)")
    a = ap.parse_args()
    variants = tuple(a.variants.split(","))
    out = Path(a.out or vt.WORK / "results" / time.strftime("grpc-frontends-%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    ports = tuple(int(p) for p in a.ports.split(","))
    vt.ensure_harness()
    ours = vt.default_ours_cmd()
    res: dict[str, Any] = {"meta": {"start_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                                    "machine": vt.machine(), "code": vt.code_version(ours), "argv": sys.argv[1:]},
                           "rounds": []}
    for r in range(1, a.rounds + 1):
        rdir = out / f"r{r}"
        rdir.mkdir(exist_ok=True)
        rnd: dict[str, Any] = {"round": r, "probe": vt.machine_probe(rdir), "measurements": []}
        res["rounds"].append(rnd)
        shift = (r - 1) % len(variants)
        order = variants[shift:] + variants[:shift]
        for variant in order:
            kind = "triton" if variant == "triton" else "workbench"
            flags = f" --grpc-frontend={variant[:6]}" + (f" --grpc-native-threads={variant[6:]}" if variant[6:] else "")
            cmd = vt.server_command(kind, ports, [a.model], ours + flags, out)
            srv = vt.Server(variant, cmd, ports[0], [a.model], rdir / f"{variant}.server.log")
            try:
                srv.start()
                assert srv.proc is not None
                count0, (cpu0, main0) = inference_count(ports[0], a.model), group_cpu(srv.proc.pid)
                rec = vt.measure(rdir, variant, a.model, "grpc", a.conc, ports[1], a)
                count1, (cpu1, main1) = inference_count(ports[0], a.model), group_cpu(srv.proc.pid)
                n = max(count1 - count0, 1)
                rec.update(inferences=n, cpu_us_per_inf=(cpu1 - cpu0) / n * 1e6,
                           main_thread_us_per_inf=(main1 - main0) / n * 1e6)
                vt.log(f"  {variant}: {rec['cpu_us_per_inf']:.0f} µs CPU/inf all threads, "
                       f"{rec['main_thread_us_per_inf']:.0f} main thread")
                rnd["measurements"].append(rec)
            except RuntimeError as e:
                vt.log(str(e))
                rnd[f"{variant}_error"] = str(e)
            finally:
                srv.stop()
            (out / "results.json").write_text(json.dumps(res, indent=1))
    lines = [f"{res['meta']['machine']}; {res['meta']['code']}", "",
             "| front end | infer/s per round | median | p99 ms median | CPU µs/inf all threads | main thread |",
             "|---|---|---:|---:|---:|---:|"]
    for variant in variants:
        recs = [m for rnd in res["rounds"] for m in rnd["measurements"] if m["server"] == variant and m.get("ok")]
        if not recs:
            continue
        tput = [m["infer_per_s"] for m in recs]
        lines.append(f"| {variant} | {' / '.join(f'{t:.0f}' for t in tput)} | {statistics.median(tput):.0f} | "
                     f"{statistics.median(m['p99_ms'] for m in recs):.2f} | "
                     f"{statistics.median(m['cpu_us_per_inf'] for m in recs):.0f} | "
                     f"{statistics.median(m['main_thread_us_per_inf'] for m in recs):.0f} |")
    probes = [f"{rnd['probe'].get('mlp_b1', 0):.0f}" for rnd in res["rounds"]]
    lines += ["", f"probe (raw ORT mlp b1, infer/s per round): {' / '.join(probes)}"]
    (out / "tables.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
