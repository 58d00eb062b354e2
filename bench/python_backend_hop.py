"""The Python-backend hop at c=16 next to the real Triton, with CPU time per inference (issue 34, target 3).

    python3 bench/python_backend_hop.py [--rounds 3] [--protocols http,grpc] [--conc 16] [--interval 2000]
        [--windows 3] [--port-base 19600] [--before-src TREE] [--out DIR]

Serves the harness's Python identity model (``$BENCH_WORK/triton_py_repo/identity``:
``../shared/bench/peers/triton_python_identity_model.py``, INPUT0 FP32 [-1,64] -> OUTPUT0,
``max_batch_size: 32``, ``dynamic_batching { max_queue_delay_microseconds: 1000 }``, one instance) from a
repository holding only that folder with the real tritonserver 2.51 (``T``, ``../shared/bench/tritonserver.sh``),
``workbench serve`` of this tree (``W``) and, with ``--before-src``, of another source tree (``B``: e.g.
``git archive <commit> workbench | tar -x -C /tmp/b``). All servers start and warm up first; the measurement
loop alternates the servers inside each round (T, W, B, T, W, B, ...), per protocol; take the benchmark lock
around the whole run (``flock /tmp/bench.lock python3 bench/python_backend_hop.py ...``).

One measurement is perf_analyzer 2.41 ``-b 1 --input-data $BENCH_WORK/data/identity.json --percentile 99
--measurement-mode time_windows -s 999 -r WINDOWS -p INTERVAL --concurrency-range C`` (HTTP with binary
tensors both ways; gRPC). Around it this script reads, from ``/proc``, the CPU time (user + system) of the
server process (all its threads) and of its child processes (the Python backend's stub: Triton's
``triton_python_backend_stub``, ours ``stub.py``) and the model's ``inference_count`` / ``execution_count``
from the statistics extension; CPU µs per inference = CPU delta / inference delta over the whole
perf_analyzer run (its warm-up and stabilisation windows included, for both servers alike).

Output: DIR/results.json (every measurement) and DIR/table.md (medians per server and protocol, and the
ratios to Triton taken inside each round, then their median). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SHARED_BENCH", ROOT.parent / "shared" / "bench"))
if not SHARED.is_dir():
    SHARED = Path("/work/shared/bench")
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench_work"))
PA = os.environ.get("PA", str(Path(os.environ.get("BENCH_BIN", "/tmp/bench_bin")) / "perf_analyzer"))
MODEL = "identity"


def workbench_bin() -> str:
    for candidate in (ROOT / ".venv/bin/workbench", Path("/work/main/.venv/bin/workbench")):
        if candidate.exists():
            return str(candidate)
    raise SystemExit("no workbench executable (.venv/bin/workbench)")


def process_cpu_s(pid: int) -> tuple[float, float]:
    """(CPU seconds of process ``pid``'s own threads, CPU seconds of its live descendants + reaped children)."""
    own, descendants, reaped = proc_cpu.tree_cpu_s(pid)
    return own, descendants + reaped


class Server:
    """One server process in its own session; ``pid`` is the server process itself."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], http: int, grpc: int, log: Path) -> None:
        self.label, self.http, self.grpc = label, http, grpc
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, limit_s: float = 180) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server {self.label} exited with {self.proc.returncode}")
            url = f"http://127.0.0.1:{self.http}/v2/models/{MODEL}/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
            time.sleep(0.5)
        raise SystemExit(f"server {self.label} not ready in {limit_s} s")

    def counts(self) -> tuple[int, int]:
        """(inference_count, execution_count) of the model, summed over versions."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/{MODEL}/stats", timeout=10) as r:
            stats = json.load(r)
        rows = stats.get("model_stats", [])
        return (sum(int(s.get("inference_count", 0)) for s in rows),
                sum(int(s.get("execution_count", 0)) for s in rows))

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def pa_argv(server: Server, proto: str, conc: int, interval: int, windows: int, csv_path: Path | None) -> list[str]:
    port = server.http if proto == "http" else server.grpc
    argv = ["timeout", "180", PA, "-m", MODEL, "-u", f"127.0.0.1:{port}", "-i", proto, "-b", "1",
            "--percentile", "99", "--measurement-mode", "time_windows", "-s", "999", "-r", str(windows),
            "-p", str(interval), "--concurrency-range", str(conc)]
    if proto == "http":
        argv += ["--input-tensor-format=binary", "--output-tensor-format=binary"]
    data = WORK / "data" / f"{MODEL}.json"
    if data.exists():
        argv += ["--input-data", str(data)]
    if csv_path is not None:
        argv += ["-f", str(csv_path), "--verbose-csv"]
    return argv


def measure(server: Server, proto: str, a: argparse.Namespace, base: Path) -> dict:
    count0, exec0 = server.counts()
    own0, kids0 = process_cpu_s(server.pid)
    wall0 = time.monotonic()
    with (base.with_suffix(".log")).open("wb") as log:
        rc = subprocess.run(pa_argv(server, proto, a.conc, a.interval, a.windows, base.with_suffix(".csv")),
                            stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - wall0
    own1, kids1 = process_cpu_s(server.pid)
    count1, exec1 = server.counts()
    inferences, executions = count1 - count0, exec1 - exec0
    result: dict[str, Any] = {"server": server.label, "proto": proto, "rc": rc, "wall_s": wall,
                              "inferences": inferences, "batch": inferences / max(executions, 1),
                              "server_us": (own1 - own0) * 1e6 / max(inferences, 1),
                              "stub_us": (kids1 - kids0) * 1e6 / max(inferences, 1)}
    result["all_us"] = result["server_us"] + result["stub_us"]
    with contextlib.suppress(OSError, StopIteration, KeyError, ValueError):
        with base.with_suffix(".csv").open() as f:
            row = list(csv.DictReader(f))[-1]
        result["infer_s"] = float(row["Inferences/Second"])
        result["p99_ms"] = float(row["p99 latency"]) / 1000
    return result


def table(results: list[dict], labels: list[str], protos: list[str]) -> str:
    lines = ["| protocol | server | infer/s (rounds) | infer/s median | ratio to T (median of rounds) | p99 ms | "
             "batch | server CPU µs/inf | stub CPU µs/inf | all µs/inf |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for proto in protos:
        by_round: dict[int, dict[str, dict]] = {}
        for r in results:
            if r["proto"] == proto and "infer_s" in r:
                by_round.setdefault(r["round"], {})[r["server"]] = r
        for label in labels:
            rows = [rr[label] for rr in by_round.values() if label in rr]
            if not rows:
                continue
            ratios = [rr[label]["infer_s"] / rr["T"]["infer_s"] for rr in by_round.values()
                      if label in rr and "T" in rr]
            med = statistics.median
            lines.append(
                f"| {proto} | {label} | {' / '.join(format(r['infer_s'], '.0f') for r in rows)} | "
                f"{med(r['infer_s'] for r in rows):.0f} | {med(ratios):.2f} | {med(r['p99_ms'] for r in rows):.1f} | "
                f"{med(r['batch'] for r in rows):.1f} | {med(r['server_us'] for r in rows):.0f} | "
                f"{med(r['stub_us'] for r in rows):.0f} | {med(r['all_us'] for r in rows):.0f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--interval", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--port-base", type=int, default=19600)
    ap.add_argument("--before-src", help="another source tree of workbench, served as B")
    ap.add_argument("--no-triton", action="store_true", help="only W (and B)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    source = WORK / "triton_py_repo" / MODEL
    if not (source / "config.pbtxt").exists():
        raise SystemExit(f"no {source} (run the harness's make_models.py)")
    out = a.out or WORK / "results" / f"pyhop-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    (out / "raw").mkdir(parents=True, exist_ok=True)
    repo = Path(tempfile.mkdtemp(prefix="pyhop-repo-"))
    (repo / MODEL).symlink_to(source)
    protos = a.protocols.split(",")
    base = a.port_base
    wb = workbench_bin()
    servers: list[Server] = []

    def ours(label: str, src: Path, offset: int) -> Server:
        env = dict(os.environ, PYTHONPATH=str(src))
        argv = [wb, "serve", f"--model-repository={repo}", "--http-address=127.0.0.1",
                f"--http-port={base + offset}", f"--grpc-port={base + offset + 1}",
                f"--metrics-port={base + offset + 2}"]
        return Server(label, argv, env, base + offset, base + offset + 1, out / f"{label}.server.log")

    try:
        if not a.no_triton:
            servers.append(Server("T", ["bash", str(SHARED / "tritonserver.sh"), f"--model-repository={repo}",
                                        "--http-address=127.0.0.1", f"--http-port={base + 10}",
                                        "--grpc-address=127.0.0.1", f"--grpc-port={base + 11}",
                                        "--metrics-address=127.0.0.1", f"--metrics-port={base + 12}"],
                                  dict(os.environ), base + 10, base + 11, out / "T.server.log"))
        servers.append(ours("W", ROOT, 0))
        if a.before_src:
            servers.append(ours("B", Path(a.before_src).resolve(), 20))
        for server in servers:
            server.wait_ready()
        print(f"[pyhop] ready: {' '.join(s.label for s in servers)}; out={out}", flush=True)
        results: list[dict] = []
        for proto in protos:
            for server in servers:  # warm-up, unrecorded
                subprocess.run(pa_argv(server, proto, a.conc, 1000, a.windows, None), check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for rnd in range(1, a.rounds + 1):
                for server in servers:
                    result = measure(server, proto, a, out / "raw" / f"{server.label}__{proto}__r{rnd}")
                    result["round"] = rnd
                    result["loadavg"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
                    results.append(result)
                    (out / "results.json").write_text(json.dumps(results, indent=1))
                    print(f"[pyhop {time.strftime('%H:%M:%S', time.gmtime())}] {server.label} {proto} r{rnd}: "
                          f"{result.get('infer_s', 0):.0f} infer/s p99 {result.get('p99_ms', 0):.1f} ms "
                          f"batch {result['batch']:.1f} server {result['server_us']:.0f} + stub "
                          f"{result['stub_us']:.0f} us/inf", flush=True)
        text = table(results, [s.label for s in servers], protos)
        (out / "table.md").write_text(text)
        print(text)
    finally:
        for server in servers:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
