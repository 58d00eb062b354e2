"""workbench next to the real Triton, alternating servers inside one run (issue 20's side-by-side runner).

    python3 bench/vs_triton.py [--rounds 3] [--models mlp,minilm,identity] [--protocols http,grpc] [--conc 16]
        [--interval 3000] [--windows 3] [--out DIR] [--ours-cmd 'PYTHONPATH=WT WT/.venv/bin/workbench serve']
    python3 bench/vs_triton.py --tables-only DIR          # rebuild DIR/tables.md from DIR/results.json
    make bench-triton VS_TRITON_ARGS="--rounds 1 --interval 2000"

Every round, in this order, with nothing else of ours running:
1. the machine-speed probe: ../shared/bench/raw_ort.py at batch 1 (mlp and minilm, 3 s each, in-process
   onnxruntime) and a numpy copy of 64 MiB (GB/s), so the VM's speed of that minute sits next to its numbers;
2. in-process onnxruntime on minilm at batch 1,4,8,16,32 (raw_ort.py: one session, intra_op 2, inter_op 1,
   sequential, ORT_ENABLE_ALL, ORT's default spinning); the best batch is the ceiling a server is held to;
3. the real tritonserver 2.51 (../shared/bench/tritonserver.sh, its python backend running the same ONNX files
   through onnxruntime: $BENCH_WORK/triton_py_repo), started, measured, stopped;
4. ``workbench serve`` (--ours-cmd) on $BENCH_WORK/triton_repo (the same ONNX files and batching config,
   our onnxruntime backend) plus, for ``identity``, a copy of Triton's python model folder, started, measured,
   stopped.
Both servers get ``--model-control-mode=explicit --load-model=<m>`` for exactly --models, tritonserver-style
port flags (Triton also ``--*-address=127.0.0.1``), and are ready when ``GET /v2/models/<m>/ready`` is 200 for
every model (180 s limit); stop: SIGTERM to the process group, SIGKILL after 20 s.

A measurement is what ../shared/bench/pa_sweep.sh runs: one unrecorded warm-up (--windows windows of 1 s at
the same concurrency), then perf_analyzer -b 1 --input-data $BENCH_WORK/data/<m>.json --percentile 99
--measurement-mode time_windows -s 999 -r WINDOWS -p INTERVAL --concurrency-range C -f X.csv --verbose-csv -v;
``http`` is HTTP with binary tensors both ways, ``http-json`` JSON tensors, ``grpc`` gRPC.

Output (--out, default $BENCH_WORK/results/vs-triton-<UTC timestamp>): results.json (every measurement, probe,
raw ORT point, as it happens), tables.md (printed at the end): per model/protocol/concurrency the per-round
infer/s and p99 of both servers, their medians, the ratio workbench/Triton per round and its median (the ratio
is taken inside a round, the medians of those ratios are what the issue's targets are judged on), for minilm
also workbench/raw-ORT-best; the server-side breakdown (queue, compute input/infer/output from the server's
statistics, average batch size); the probes. r<N>/ holds perf_analyzer's CSV/log/command and server logs.

Timing is never pass/fail here: the verdict column says which of issue 20's targets the medians meet.
Standard library only: runs with any python3 >= 3.10. Run it under the benchmark lock
(``flock /tmp/bench.lock python3 bench/vs_triton.py ...``) on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SHARED_BENCH", ROOT.parent / "shared" / "bench"))
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench_work"))
VENVS = Path(os.environ.get("BENCH_VENVS", "/tmp/bench_venvs"))
PERF_ANALYZER = os.environ.get("PERF_ANALYZER", str(Path(os.environ.get("BENCH_BIN", "/tmp/bench_bin"))
                                                    / "perf_analyzer"))
SERVERS = ("triton", "workbench")
SERVER_NAMES = {"triton": "Triton", "workbench": "workbench"}
PROTOCOLS = {"http": "HTTP binary", "http-json": "HTTP JSON", "grpc": "gRPC"}
#: perf_analyzer --verbose-csv columns (microseconds) -> our keys (milliseconds)
PA_COLUMNS = {"p50 latency": "p50_ms", "p90 latency": "p90_ms", "p95 latency": "p95_ms", "p99 latency": "p99_ms",
              "Server Queue": "queue_ms", "Server Compute Input": "compute_input_ms",
              "Server Compute Infer": "compute_infer_ms", "Server Compute Output": "compute_output_ms"}
#: issue 20's targets (at c=16): model -> (min workbench/Triton, min workbench/raw-ORT-best, p99 not worse)
TARGETS: dict[str, tuple[float, float | None, bool]] = {
    "mlp": (1.0, None, True), "minilm": (1.0, 0.95, False), "identity": (0.8, None, False)}
TARGET_CONC = 16
NUMPY_COPY_PROBE = """
import json, sys, time
import numpy as np
a = np.ones(64 << 20, dtype=np.uint8); b = np.empty_like(a); np.copyto(b, a)
best = min((lambda t0: (np.copyto(b, a), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(20))
print(json.dumps({"bytes": a.nbytes, "best_s": best, "gb_per_s": a.nbytes / best / 1e9}))
"""


def log(msg: str) -> None:
    """One progress line on stderr, with the wall-clock time (UTC)."""
    print(f"[vs_triton {time.strftime('%H:%M:%S', time.gmtime())}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# perf_analyzer: command line and its CSV/log


def pa_command(model: str, url: str, proto: str, conc: int, interval_ms: int, windows: int,
               csv_path: Path | None = None) -> list[str]:
    """perf_analyzer's argv for one run, with pa_sweep.sh's flags.

    ``proto``: ``http`` (binary tensors), ``http-json`` or ``grpc``. With ``csv_path`` the run is a
    recorded one (``-f csv_path --verbose-csv -v``), else a warm-up. Raises KeyError for another proto.
    """
    fmt = {"http": ["--input-tensor-format=binary", "--output-tensor-format=binary"],
           "http-json": ["--input-tensor-format=json", "--output-tensor-format=json"], "grpc": []}[proto]
    argv = [PERF_ANALYZER, "-m", model, "-u", url, "-i", "grpc" if proto == "grpc" else "http", *fmt, "-b", "1",
            "--input-data", str(WORK / "data" / f"{model}.json"), "--percentile", "99",
            "--measurement-mode", "time_windows", "-s", "999", "-r", str(windows),
            "--concurrency-range", str(conc), "-p", str(interval_ms)]
    if csv_path is not None:
        argv += ["-f", str(csv_path), "--verbose-csv", "-v"]
    return argv


def parse_pa(csv_path: Path, log_path: Path) -> dict[str, Any]:
    """One recorded perf_analyzer run -> numbers (latencies in ms, throughput in inferences/s).

    Reads the last row of the ``--verbose-csv`` file (microseconds) and, from the ``-v`` log, the per-window
    throughputs, the client's average request time, and the server's statistics over the measurement: its
    inference/execution counts (average batch size = their ratio; None where it reports no executions) and
    its average request latency with the overhead part of it. Raises OSError/ValueError/IndexError on a missing or
    empty CSV (a failed run).
    """
    with open(csv_path, newline="") as f:
        row = list(csv.DictReader(f))[-1]
    out: dict[str, Any] = {"infer_per_s": float(row["Inferences/Second"])}
    for column, key in PA_COLUMNS.items():
        value = row.get(column)
        out[key] = float(value) / 1000.0 if value not in (None, "") else None
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    out["windows"] = [float(x) for x in re.findall(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec", text)]
    inferences = re.findall(r"Inference count: (\d+)", text)
    executions = re.findall(r"Execution count: (\d+)", text)
    out["avg_batch"] = (int(inferences[-1]) / int(executions[-1])
                        if inferences and executions and int(executions[-1]) > 0 else None)
    avg = re.findall(r"Avg (?:HTTP|gRPC) time: (\d+) usec", text)
    out["avg_ms"] = int(avg[-1]) / 1000.0 if avg else None
    server = re.findall(r"Avg request latency: (\d+) usec \(overhead (\d+) usec", text)
    out["server_request_ms"] = int(server[-1][0]) / 1000.0 if server else None
    out["server_overhead_ms"] = int(server[-1][1]) / 1000.0 if server else None
    return out


# ----------------------------------------------------------------------------------------------------------------
# servers


def port_busy(port: int) -> bool:
    """Whether something already listens on 127.0.0.1:port."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http_status(url: str) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return 0


class Server:
    """A server process in its own session (process group), started from a shell command line."""

    def __init__(self, name: str, command: str, http_port: int, models: list[str], log_path: Path) -> None:
        self.name, self.command, self.http_port, self.models, self.log_path = (
            name, command, http_port, models, log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 180.0) -> float:
        """Start it, wait until every model is ready; returns seconds to ready. Raises RuntimeError."""
        log(f"starting {self.name}: {self.command}")
        t0 = time.monotonic()
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(["bash", "-c", self.command], stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
        while time.monotonic() - t0 < timeout_s:
            if all(http_status(f"http://127.0.0.1:{self.http_port}/v2/models/{m}/ready") == 200
                   for m in self.models):
                took = time.monotonic() - t0
                log(f"{self.name} ready after {took:.1f} s")
                return took
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        tail = self.log_path.read_text(errors="replace").splitlines()[-15:]
        self.stop()
        raise RuntimeError(f"{self.name} not ready (log {self.log_path}):\n" + "\n".join(tail))

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 20 s (as the shared harness's run_peer.sh)."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.25)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self.proc = None
        log(f"stopped {self.name}")


def server_command(server: str, ports: tuple[int, int, int], models: list[str], ours_cmd: str,
                   py_repo: Path) -> str:
    """The shell command line that starts ``triton`` or ``workbench`` on ``ports`` (http, grpc, metrics)."""
    http, grpc, metrics = ports
    load = " --model-control-mode=explicit" + "".join(f" --load-model={m}" for m in models)
    if server == "triton":
        return (f"exec bash {shlex.quote(str(SHARED / 'tritonserver.sh'))}"
                f" --model-repository={WORK / 'triton_py_repo'}"
                f" --http-address=127.0.0.1 --http-port={http} --grpc-address=127.0.0.1 --grpc-port={grpc}"
                f" --metrics-address=127.0.0.1 --metrics-port={metrics}{load}")
    repos = f" --model-repository={WORK / 'triton_repo'}"
    if "identity" in models:
        repos += f" --model-repository={py_repo}"
    return f"{ours_cmd}{repos} --http-port={http} --grpc-port={grpc} --metrics-port={metrics}{load}"


def python_identity_repo(out: Path) -> Path:
    """A repository holding a copy of Triton's python ``identity`` model folder, for workbench."""
    repo = out / "workbench_py_repo"
    src = WORK / "triton_py_repo" / "identity"
    dst = repo / "identity"
    (dst / "1").mkdir(parents=True, exist_ok=True)
    (dst / "config.pbtxt").write_bytes((src / "config.pbtxt").read_bytes())
    (dst / "1" / "model.py").write_bytes((src / "1" / "model.py").read_bytes())
    return repo


# ----------------------------------------------------------------------------------------------------------------
# one run


def tools_python() -> str:
    """The shared harness's tools venv python (onnxruntime, numpy)."""
    return str(VENVS / "tools" / "bin" / "python")


def run_json(argv: list[str], timeout_s: float) -> str:
    """Run a helper, return its stdout; raises subprocess.CalledProcessError / TimeoutExpired."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=timeout_s).stdout


def machine_probe(rdir: Path) -> dict[str, Any]:
    """raw_ort.py at batch 1 (mlp, minilm; 3 s each) and a numpy 64 MiB copy: this minute's machine speed."""
    out = rdir / "probe_raw_ort.json"
    probe: dict[str, Any] = {"time_utc": time.strftime("%H:%M:%S", time.gmtime()), "loadavg": loadavg()}
    try:
        run_json([tools_python(), str(SHARED / "raw_ort.py"), "--work", str(WORK), "--models", "mlp,minilm",
                  "--batches", "1", "--repeats", "1", "--seconds", "3", "--warmup", "0.3", "--out", str(out)], 120)
        probe.update({f"{r['model']}_b1": r["infer_per_s"] for r in json.loads(out.read_text())["rows"]})
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        probe["error_raw_ort"] = str(e)
    try:
        probe["numpy_copy_gb_per_s"] = json.loads(run_json([tools_python(), "-c", NUMPY_COPY_PROBE], 60))[
            "gb_per_s"]
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        probe["error_copy"] = str(e)
    return probe


def raw_ort_minilm(rdir: Path, batches: str, seconds: float) -> dict[str, Any]:
    """In-process onnxruntime on minilm per batch size (raw_ort.py); ``best`` = the highest infer/s."""
    out = rdir / "raw_ort_minilm.json"
    try:
        run_json([tools_python(), str(SHARED / "raw_ort.py"), "--work", str(WORK), "--models", "minilm",
                  "--batches", batches, "--repeats", "1", "--seconds", str(seconds), "--warmup", "0.5",
                  "--out", str(out)], 600)
    except (subprocess.SubprocessError, OSError) as e:
        return {"error": str(e)}
    per_batch = {int(r["batch"]): r["infer_per_s"] for r in json.loads(out.read_text())["rows"]}
    best = max(per_batch, key=lambda b: per_batch[b])
    return {"per_batch": per_batch, "best_batch": best, "best": per_batch[best]}


def loadavg() -> str:
    """The 1/5/15-minute load averages (other engineers' work on the shared cores shows up here)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "-"


def group_cpu(pgid: int) -> dict[str, float]:
    """CPU seconds (user + system) of every thread of every process in process group ``pgid``, by
    ``pid/tid`` (the server and its children: Triton's python-backend stubs, ours)."""
    return {f"{pid}/{tid}": cpu for (pid, tid), (_, cpu) in proc_cpu.group_thread_cpu_s(pgid).items()}


def inference_count(http_port: int, model: str) -> int | None:
    """The model's ``inference_count`` summed over its versions (the statistics extension), None if unread."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats", timeout=10) as r:
            return sum(int(s["inference_count"]) for s in json.load(r)["model_stats"])
    except (OSError, ValueError, KeyError):
        return None


def measure(rdir: Path, server: str, model: str, proto: str, conc: int, port: int, a: argparse.Namespace,
            pgid: int | None = None, http_port: int | None = None) -> dict[str, Any]:
    """Warm-up plus one recorded perf_analyzer run; the parsed numbers, or ``ok: False`` with the error.

    With ``pgid`` and ``http_port`` also the server's CPU per inference over the recorded run: every thread of
    its process group from ``/proc`` (``cpu_us``: all of them; ``busiest_thread_us``: the one thread that
    spent the most, workbench's event loop), divided by the inferences its statistics counted meanwhile.
    """
    base = rdir / f"{server}__{model}__{proto}__c{conc}"
    url = f"localhost:{port}"
    rec: dict[str, Any] = {"server": server, "model": model, "proto": proto, "conc": conc,
                           "time_utc": time.strftime("%H:%M:%S", time.gmtime()), "loadavg": loadavg()}
    with open(f"{base}.warmup.log", "wb") as f:
        try:
            subprocess.run(["timeout", "120", *pa_command(model, url, proto, conc, 1000, a.windows)],
                           stdout=f, stderr=subprocess.STDOUT, check=False)
        except OSError as e:
            rec.update(ok=False, error=str(e))
            return rec
    argv = pa_command(model, url, proto, conc, a.interval, a.windows, Path(f"{base}.csv"))
    Path(f"{base}.cmd").write_text(shlex.join(argv) + "\n")
    accounted = pgid is not None and http_port is not None
    if accounted:
        cpu0, n0 = group_cpu(pgid), inference_count(http_port, model)  # type: ignore[arg-type]
    with open(f"{base}.log", "wb") as f:
        rc = subprocess.run(["timeout", "120", *argv], stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if accounted:
        cpu1, n1 = group_cpu(pgid), inference_count(http_port, model)  # type: ignore[arg-type]
        if n0 is not None and n1 is not None and n1 > n0:
            deltas = [v - cpu0.get(k, 0.0) for k, v in cpu1.items()]
            rec["cpu_us"] = 1e6 * sum(deltas) / (n1 - n0)
            rec["busiest_thread_us"] = 1e6 * max(deltas) / (n1 - n0)
    try:
        rec.update(ok=True, **parse_pa(Path(f"{base}.csv"), Path(f"{base}.log")))
        cpu = f", CPU {rec['cpu_us']:.0f} us/inf (busiest thread {rec['busiest_thread_us']:.0f})" \
            if "cpu_us" in rec else ""
        log(f"  {server} {model} {proto} c={conc}: {rec['infer_per_s']:.1f} infer/s, p99 {rec['p99_ms']:.2f} ms{cpu}")
    except (OSError, ValueError, IndexError, KeyError) as e:
        errs = [ln for ln in Path(f"{base}.log").read_text(errors="replace").splitlines()
                if re.search("error|fail", ln, re.I)][:2]
        rec.update(ok=False, error=f"rc {rc}: {'; '.join(errs) or e}")
        log(f"  {server} {model} {proto} c={conc}: FAILED ({rec['error']})")
    return rec


def code_version(ours_cmd: str) -> str:
    """``git describe``-like note for the code ours_cmd runs (its PYTHONPATH's checkout, else this one)."""
    m = re.search(r"PYTHONPATH=(\S+)", ours_cmd)
    where = m.group(1).split(":")[0] if m else str(ROOT)
    try:
        head = run_json(["git", "-C", where, "log", "-1", "--format=%h %cI %s"], 10).strip()
        dirty = run_json(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"], 10).strip()
        return f"{where}: {head[:100]}{' (+ uncommitted changes)' if dirty else ''}"
    except (subprocess.SubprocessError, OSError):
        return f"{where}: (not a git checkout)"


def machine() -> str:
    """CPU model and count, from lscpu."""
    try:
        text = run_json(["lscpu"], 10)
    except (subprocess.SubprocessError, OSError):
        return f"{os.cpu_count()} CPUs"
    name = re.search(r"Model name:\s*(.+)", text)
    return f"{os.cpu_count()} vCPU, {name.group(1).strip() if name else '?'}"


def ensure_harness() -> None:
    """Run ../shared/bench's setup.sh / make_models.py when perf_analyzer or the repositories are missing.

    Raises:
        SystemExit: the shared harness is not where ``SHARED_BENCH`` (default ``../shared/bench`` beside the
            checkout) says: without its tritonserver.sh and raw_ort.py half of every table would be empty.
    """
    missing = [name for name in ("tritonserver.sh", "raw_ort.py", "setup.sh") if not (SHARED / name).exists()]
    if missing:
        raise SystemExit(f"the shared benchmark harness is not at {SHARED} ({', '.join(missing)} missing): "
                         "set SHARED_BENCH to the path of shared/bench (tritonserver.sh, raw_ort.py, setup.sh)")
    if not Path(PERF_ANALYZER).exists() or not Path(tools_python()).exists():
        log(f"perf_analyzer or the tools venv missing: running {SHARED / 'setup.sh'}")
        subprocess.run(["bash", str(SHARED / "setup.sh")], check=True)
    if not (WORK / "triton_py_repo" / "identity" / "1" / "model.py").exists():
        log(f"{WORK} repositories missing: running make_models.py")
        subprocess.run([tools_python(), str(SHARED / "make_models.py")], check=True)


def save_tables(directory: Path, text: str) -> None:
    """Write ``text`` to ``directory``/tables.md and print it (every runner's ``--table`` mode)."""
    (directory / "tables.md").write_text(text)
    print(text)


def default_ours_cmd() -> str:
    """``workbench serve`` of this checkout: its own .venv, else the main checkout's, with PYTHONPATH on it."""
    venv = ROOT / ".venv"
    if not (venv / "bin" / "workbench").exists():
        venv = Path("/work/main/.venv")
    return f"PYTHONPATH={ROOT} {venv / 'bin' / 'workbench'} serve"


def run(a: argparse.Namespace) -> dict[str, Any]:
    """All rounds; writes results.json after every step and returns the results."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ensure_harness()
    models = a.models.split(",")
    protocols = a.protocols.split(",")
    for p in protocols:
        if p not in PROTOCOLS:
            raise SystemExit(f"unknown protocol {p!r} (one of {', '.join(PROTOCOLS)})")
    concs = [int(c) for c in str(a.conc).split(",")]
    ports: dict[str, tuple[int, int, int]] = {}
    for server, spec in (("triton", a.triton_ports), ("workbench", a.ours_ports)):
        pp = [int(p) for p in spec.split(",")]
        if len(pp) != 3:
            raise SystemExit(f"ports for {server} need http,grpc,metrics (got {spec!r})")
        ports[server] = (pp[0], pp[1], pp[2])
        busy = [p for p in pp if port_busy(p)]
        if busy:
            raise SystemExit(f"port(s) {busy} already in use ({server}); pick others with --triton-ports/--ours-ports")
    py_repo = python_identity_repo(out) if "identity" in models else out / "workbench_py_repo"
    res: dict[str, Any] = {
        "meta": {"start_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "machine": machine(),
                 "rounds": a.rounds, "models": models, "protocols": protocols, "conc": concs,
                 "interval_ms": a.interval, "windows": a.windows, "ours_cmd": a.ours_cmd,
                 "ours_code": code_version(a.ours_cmd), "argv": sys.argv[1:]},
        "rounds": []}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(res, indent=1))

    for r in range(1, a.rounds + 1):
        rdir = out / f"r{r}"
        rdir.mkdir(exist_ok=True)
        rnd: dict[str, Any] = {"round": r, "start_utc": time.strftime("%H:%M:%S", time.gmtime()),
                               "measurements": []}
        res["rounds"].append(rnd)
        log(f"round {r}/{a.rounds}: machine-speed probe")
        rnd["probe"] = machine_probe(rdir)
        save()
        if "minilm" in models and not a.no_raw_ort:
            log(f"round {r}: in-process onnxruntime, minilm, batches {a.raw_batches}")
            rnd["raw_ort_minilm"] = raw_ort_minilm(rdir, a.raw_batches, a.raw_seconds)
            save()
        for server in SERVERS:
            cmd = server_command(server, ports[server], models, a.ours_cmd, py_repo)
            srv = Server(server, cmd, ports[server][0], models, rdir / f"{server}.server.log")
            try:
                rnd[f"{server}_ready_s"] = srv.start()
                for model in models:
                    for proto in protocols:
                        port = ports[server][1 if proto == "grpc" else 0]
                        for conc in concs:
                            pgid = srv.proc.pid if srv.proc is not None else None
                            rnd["measurements"].append(measure(rdir, server, model, proto, conc, port, a,
                                                               pgid, ports[server][0]))
                            save()
            except RuntimeError as e:
                log(str(e))
                rnd[f"{server}_error"] = str(e)
            finally:
                srv.stop()
            save()
    res["meta"]["end_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    save()
    return res


# ----------------------------------------------------------------------------------------------------------------
# tables


def med(values: list[float]) -> float | None:
    """Median of the values present (None when there are none)."""
    return statistics.median(values) if values else None


def cell(v: float | None, nd: int = 1) -> str:
    """A table cell: the number with nd decimals, '-' for None."""
    return "-" if v is None else f"{v:.{nd}f}"


def tput_digits(v: float | None) -> int:
    """Decimals for a throughput: 1 below 100 infer/s, else 0."""
    return 1 if v is not None and v < 100 else 0


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    return a / b if a is not None and b else None


def collect(res: dict[str, Any]) -> dict[tuple[str, str, int], dict[str, list[dict[str, Any] | None]]]:
    """(model, proto, conc) -> server -> one measurement (or None: failed/missing) per round."""
    keys: list[tuple[str, str, int]] = []
    for rnd in res["rounds"]:
        for m in rnd["measurements"]:
            k = (m["model"], m["proto"], m["conc"])
            if k not in keys:
                keys.append(k)
    table: dict[tuple[str, str, int], dict[str, list[dict[str, Any] | None]]] = {}
    for k in keys:
        table[k] = {}
        for server in SERVERS:
            per_round: list[dict[str, Any] | None] = []
            for rnd in res["rounds"]:
                hit = [m for m in rnd["measurements"]
                       if (m["model"], m["proto"], m["conc"]) == k and m["server"] == server and m.get("ok")]
                per_round.append(hit[0] if hit else None)
            table[k][server] = per_round
    return table


def verdict(model: str, conc: int, tput_ratio: float | None, p99_ratio: float | None,
            raw_ratio: float | None) -> str:
    """Whether the medians meet issue 20's target for this model ('-' where the issue sets none)."""
    if model not in TARGETS or conc != TARGET_CONC:
        return "-"
    need, need_raw, p99_not_worse = TARGETS[model]
    if tput_ratio is None:
        return "no data"
    parts = [f"≥ {need:.2f}× Triton: {'met' if tput_ratio >= need else 'NOT met'}"]
    if p99_not_worse:
        parts.append(f"p99 not worse: {'met' if p99_ratio is not None and p99_ratio <= 1.0 else 'NOT met'}")
    if need_raw is not None:
        parts.append(f"≥ {need_raw:.2f}× raw ORT: "
                     f"{'met' if raw_ratio is not None and raw_ratio >= need_raw else 'NOT met'}")
    return "; ".join(parts)


def tables(res: dict[str, Any]) -> str:
    """The markdown report of one run (results.json's content)."""
    meta, rounds = res["meta"], res["rounds"]
    n = len(rounds)
    raw_best = [(rnd.get("raw_ort_minilm") or {}).get("best") for rnd in rounds]
    md = [f"Run {meta['start_utc']} – {meta.get('end_utc', '(unfinished)')} UTC; {meta['machine']}; "
          f"{n} round(s), each: probe, raw ORT, Triton, workbench. perf_analyzer -b 1, {meta['windows']} windows of "
          f"{meta['interval_ms']} ms, p99. workbench: `{meta['ours_cmd']}` ({meta['ours_code']}).",
          "Ratios are workbench/Triton inside one round; 'median' of a ratio column is the median of the per-round "
          "ratios (what the targets are judged on). p99 ratio < 1 = workbench's p99 lower. 'load T / W': the "
          "1-minute load average as each server's measurement began (2 cores; perf_analyzer and the server "
          "make ~3 on their own, more = other work on the machine).", ""]
    md += ["### Summary (medians over rounds)", "",
           "| model | protocol | conc | Triton infer/s | workbench infer/s | workbench/Triton | Triton p99 ms | "
           "workbench p99 ms | p99 ratio | raw ORT best | workbench/raw ORT | issue 20 target |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    detail: list[str] = []
    data = collect(res)
    for (model, proto, conc), per in data.items():
        t, w = per["triton"], per["workbench"]
        tt = [x["infer_per_s"] if x else None for x in t]
        wt = [x["infer_per_s"] if x else None for x in w]
        tp = [x["p99_ms"] if x else None for x in t]
        wp = [x["p99_ms"] if x else None for x in w]
        rt = [ratio(a, b) for a, b in zip(wt, tt, strict=True)]
        rp = [ratio(a, b) for a, b in zip(wp, tp, strict=True)]
        rr = [ratio(a, b) for a, b in zip(wt, raw_best, strict=True)] if model == "minilm" else [None] * n
        present = lambda xs: [x for x in xs if x is not None]  # noqa: E731
        mt, mw, mrt, mrp = med(present(tt)), med(present(wt)), med(present(rt)), med(present(rp))
        mraw, mrr = (med(present(raw_best)), med(present(rr))) if model == "minilm" else (None, None)
        nd = tput_digits(mw if mw is not None else mt)
        md.append(f"| {model} | {PROTOCOLS.get(proto, proto)} | {conc} | {cell(mt, nd)} | {cell(mw, nd)} | "
                  f"{cell(mrt, 2)} | {cell(med(present(tp)), 2)} | {cell(med(present(wp)), 2)} | {cell(mrp, 2)} | "
                  f"{cell(mraw, nd)} | {cell(mrr, 2)} | {verdict(model, conc, mrt, mrp, mrr)} |")
        head = ("| round | Triton infer/s | workbench infer/s | workbench/Triton | Triton p99 ms | workbench p99 ms "
                "| p99 ratio |")
        sep = "|---|---:|---:|---:|---:|---:|---:|"
        if model == "minilm":
            head += " raw ORT best infer/s (batch) | workbench/raw ORT |"
            sep += "---:|---:|"
        detail += [f"### {model}, {PROTOCOLS.get(proto, proto)}, c={conc}", "", head + " load T / W |",
                   sep + "---|"]
        for i in range(n):
            line = (f"| {i + 1} | {cell(tt[i], nd) if t[i] else 'FAILED'} | {cell(wt[i], nd) if w[i] else 'FAILED'} | "
                    f"{cell(rt[i], 2)} | {cell(tp[i], 2)} | {cell(wp[i], 2)} | {cell(rp[i], 2)} |")
            if model == "minilm":
                rom = rounds[i].get("raw_ort_minilm") or {}
                line += f" {cell(rom.get('best'), nd)} (b={rom.get('best_batch', '-')}) | {cell(rr[i], 2)} |"
            loads = [(x or {}).get("loadavg", "-").split()[0] for x in (t[i], w[i])]
            detail.append(line + f" {loads[0]} / {loads[1]} |")
        line = (f"| median | {cell(mt, nd)} | {cell(mw, nd)} | {cell(mrt, 2)} | {cell(med(present(tp)), 2)} | "
                f"{cell(med(present(wp)), 2)} | {cell(mrp, 2)} |")
        if model == "minilm":
            line += f" {cell(mraw, nd)} | {cell(mrr, 2)} |"
        detail += [line + " |", ""]
    md += ["", *detail]
    md += ["### Server-side breakdown (mean ms per request from the server's statistics, median over rounds; "
           "avg batch = inferences / executions)", "",
           "| model | protocol | conc | server | queue | compute input | compute infer | compute output | "
           "server overhead | server total | client avg | avg batch |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, proto, conc), per in data.items():
        for server in SERVERS:
            xs = [x for x in per[server] if x]
            m = lambda k, xs=xs: med([x[k] for x in xs if x.get(k) is not None])  # noqa: E731
            md.append(f"| {model} | {PROTOCOLS.get(proto, proto)} | {conc} | {SERVER_NAMES[server]} | "
                      f"{cell(m('queue_ms'), 2)} | {cell(m('compute_input_ms'), 2)} | "
                      f"{cell(m('compute_infer_ms'), 2)} | "
                      f"{cell(m('compute_output_ms'), 2)} | {cell(m('server_overhead_ms'), 2)} | "
                      f"{cell(m('server_request_ms'), 2)} | {cell(m('avg_ms'), 2)} | {cell(m('avg_batch'), 1)} |")
    md += ["", "### Server CPU per inference (µs, every thread of the server's process group from /proc over "
           "the recorded run, / inferences its statistics counted; per round, then the median)", "",
           "| model | protocol | conc | server | all threads per round | all threads median | busiest thread "
           "per round | busiest thread median |", "|---|---|---:|---|---|---:|---|---:|"]
    for (model, proto, conc), per in data.items():
        for server in SERVERS:
            alls = [x.get("cpu_us") if x else None for x in per[server]]
            busy = [x.get("busiest_thread_us") if x else None for x in per[server]]
            md.append(f"| {model} | {PROTOCOLS.get(proto, proto)} | {conc} | {SERVER_NAMES[server]} | "
                      f"{' / '.join(cell(v, 0) for v in alls)} | {cell(med([v for v in alls if v is not None]), 0)} | "
                      f"{' / '.join(cell(v, 0) for v in busy)} | {cell(med([v for v in busy if v is not None]), 0)} |")
    md += ["", "### Machine-speed probe and in-process onnxruntime per round", "",
           "| round | time UTC | loadavg | probe mlp b=1 infer/s | probe minilm b=1 infer/s | numpy 64 MiB copy GB/s | "
           "raw ORT minilm infer/s per batch | Triton ready s | workbench ready s |",
           "|---|---|---|---:|---:|---:|---|---:|---:|"]
    for rnd in rounds:
        p = rnd.get("probe", {})
        rom = rnd.get("raw_ort_minilm") or {}
        per_batch = ", ".join(f"b{b}: {v:.1f}" for b, v in (rom.get("per_batch") or {}).items()) or "-"
        md.append(f"| {rnd['round']} | {p.get('time_utc', '-')} | {p.get('loadavg', '-')} | "
                  f"{cell(p.get('mlp_b1'), 0)} | "
                  f"{cell(p.get('minilm_b1'), 1)} | {cell(p.get('numpy_copy_gb_per_s'), 2)} | {per_batch} | "
                  f"{cell(rnd.get('triton_ready_s'), 1)} | {cell(rnd.get('workbench_ready_s'), 1)} |")
    errors = failures(res)
    if errors:
        md += ["", "Failures:", *[f"* {e}" for e in errors]]
    return "\n".join(md) + "\n"


def failures(res: dict[str, Any]) -> list[str]:
    """One line per server that did not start and per measurement that failed, in run order."""
    rounds = res["rounds"]
    errors = [f"round {rnd['round']} {s}: {rnd[s + '_error'].splitlines()[0]}"
              for rnd in rounds for s in SERVERS if rnd.get(s + "_error")]
    errors += [f"round {rnd['round']} {m['server']} {m['model']} {m['proto']} c={m['conc']}: {m.get('error')}"
               for rnd in rounds for m in rnd["measurements"] if not m.get("ok")]
    return errors


def reparse(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    """Parse every recorded perf_analyzer run again from out/r<N>/ (tables of an older run get new columns)."""
    for rnd in res["rounds"]:
        for m in rnd["measurements"]:
            base = out / f"r{rnd['round']}" / f"{m['server']}__{m['model']}__{m['proto']}__c{m['conc']}"
            if m.get("ok"):
                with contextlib.suppress(OSError, ValueError, IndexError, KeyError):
                    m.update(parse_pa(Path(f"{base}.csv"), Path(f"{base}.log")))
    return res


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run (or only rebuild the tables), write tables.md, print it."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,minilm,identity")
    ap.add_argument("--protocols", default="http,grpc", help=f"comma-separated: {', '.join(PROTOCOLS)}")
    ap.add_argument("--conc", default="16", help="concurrency, or a comma-separated list")
    ap.add_argument("--interval", type=int, default=3000, help="ms per measurement window")
    ap.add_argument("--windows", type=int, default=3, help="measurement windows per run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ours-cmd", default=default_ours_cmd(),
                    help="shell command line starting workbench serve (flags are appended); default: %(default)s")
    ap.add_argument("--triton-ports", default="8400,8401,8402", help="http,grpc,metrics")
    ap.add_argument("--ours-ports", default="8410,8411,8412", help="http,grpc,metrics")
    ap.add_argument("--raw-batches", default="1,4,8,16,32")
    ap.add_argument("--raw-seconds", type=float, default=3.0, help="measured seconds per raw ORT batch size")
    ap.add_argument("--no-raw-ort", action="store_true", help="skip the in-process minilm batches")
    ap.add_argument("--tables-only", metavar="DIR", help="rebuild DIR/tables.md from DIR/results.json")
    a = ap.parse_args(argv)
    if a.tables_only:
        out = Path(a.tables_only)
        res = reparse(out, json.loads((out / "results.json").read_text()))
    else:
        a.out = a.out or str(WORK / "results" / f"vs-triton-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
        out = Path(a.out)

        def on_term(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        try:
            res = run(a)
        except KeyboardInterrupt:
            if not (out / "results.json").exists():
                log("interrupted before anything was measured")
                return 130
            log("interrupted: tables from what was measured")
            res = json.loads((out / "results.json").read_text())
    text = tables(res)
    (out / "tables.md").write_text(text)
    print(text)
    log(f"wrote {out / 'tables.md'} and {out / 'results.json'}")
    failed = failures(res)
    if failed:
        log(f"{len(failed)} server start(s) or measurement(s) failed (listed under Failures): exit status 1")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
