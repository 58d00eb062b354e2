"""Which ASGI server should carry the v2 HTTP front end: the same engine and app under each, side by side.

    python bench/http_server_choice.py [--servers uvicorn,granian,h11] [--rounds 3] [--port-base 19520]
        [--granian-path DIR] [--seconds 3]
    python bench/http_server_choice.py --serve KIND PORT [--granian-path DIR]    # one server (used by the above)

Each server is one process: ``workbench.Server`` on ``$BENCH_WORK/triton_repo`` with ``mlp`` loaded and the
app of ``workbench.frontends.http.create_app`` served on 127.0.0.1:PORT by

* ``uvicorn``: what ``workbench serve`` runs (``workbench.serving.http_service``: uvicorn + httptools with the
  project's protocol subclass: one write per response, disconnect callbacks, connection caps);
* ``uvicorn-plain``: stock uvicorn + httptools (no subclass);
* ``h11``: stock uvicorn with the pure-Python h11 parser;
* ``granian``: granian's embedded server (``granian.server.embed``, ASGI without lifespan, HTTP/1.1, Rust
  runtime threads ``--granian-threads``) on the same event loop as the engine: HTTP parsing, socket reads and
  writes run in Rust threads without the GIL; the app and the engine stay on the loop thread.
  granian is not a dependency of the project: install it somewhere (``pip install --target DIR granian``)
  and pass ``--granian-path DIR``;
* ``granian-nowatch``: granian with the infer path's per-request disconnect watcher task left out (a
  measurement of what that task costs, not a configuration to serve with: a client that leaves goes unnoticed).

All servers start first; then every round measures each in turn (alternating, so the shared machine's minute
weighs on all of them alike): perf_analyzer (``$BENCH_BIN/perf_analyzer``) mlp, HTTP binary tensors, c=16,
``-b 1``, a warm-up (3 windows of 1 s), then 3 windows of ``--seconds``; around that measured run the CPU
time of every thread of the server process from ``/proc/<pid>/task/*/stat`` (the loop thread = the main
thread, and all threads), divided by the inferences the server's statistics counted in it. Printed: a
markdown table per round and the medians. Results: bench/RESULTS.md, "Issue 34: engine and HTTP path".
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench_work"))
PERF_ANALYZER = str(Path(os.environ.get("BENCH_BIN", "/tmp/bench_bin")) / "perf_analyzer")
KINDS = ("uvicorn", "uvicorn-plain", "h11", "granian", "granian-nowatch")


def serve(kind: str, port: int, granian_threads: int) -> None:
    """Run the engine and the v2 app under ``kind`` on 127.0.0.1:``port`` until killed."""
    import asyncio

    from workbench import Server, ServerOptions
    from workbench.frontends.http import create_app

    async def main() -> None:
        options = ServerOptions(model_repository=[str(WORK / "triton_repo")], model_control_mode="explicit",
                                load_model=["mlp"])
        async with Server(options) as server:
            if kind == "uvicorn":
                from workbench.serving.http_service import http_service

                service = http_service(server, options, embedded=True)
                service.config.host, service.config.port = "127.0.0.1", port
                await service.serve()
            elif kind in ("uvicorn-plain", "h11"):
                import uvicorn

                config = uvicorn.Config(create_app(server), host="127.0.0.1", port=port,
                                        http="h11" if kind == "h11" else "httptools", lifespan="off",
                                        log_level="warning", access_log=False, server_header=False,
                                        date_header=False)
                await uvicorn.Server(config).serve()
            else:
                from granian.constants import HTTPModes, Interfaces  # type: ignore[import-not-found]
                from granian.server.embed import Server as Granian  # type: ignore[import-not-found]

                app = create_app(server)
                if kind == "granian-nowatch":
                    app = _without_disconnect_watch(app)
                await Granian(app, address="127.0.0.1", port=port, interface=Interfaces.ASGINL,
                              http=HTTPModes.http1, runtime_threads=granian_threads, websockets=False,
                              log_level="warning").serve()

    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


def _without_disconnect_watch(app):
    """``app`` with an empty disconnect-callback set in every scope: the infer path then starts no watcher
    task per request (what granian costs without one; a client that goes away is then not noticed, so this
    is a measurement, not a configuration to serve with)."""
    from workbench.frontends.http.protocol import DISCONNECT_EXTENSION

    async def wrapped(scope, receive, send):
        scope["extensions"] = {**(scope.get("extensions") or {}), DISCONNECT_EXTENSION: set()}
        await app(scope, receive, send)

    return wrapped


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of every thread of ``pid``, by thread id."""
    return {tid: cpu for tid, (_, cpu) in proc_cpu.thread_cpu_s(pid).items()}


def counts(port: int) -> tuple[int, int]:
    """mlp's (inference_count, execution_count) from the server's statistics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/mlp/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def measure(pid: int, port: int, seconds: float) -> dict[str, float]:
    """One perf_analyzer run against ``port`` with the server's CPU accounted (see the module doc)."""
    base = [PERF_ANALYZER, "-m", "mlp", "-u", f"127.0.0.1:{port}", "-i", "http", "--input-tensor-format=binary",
            "--output-tensor-format=binary", "-b", "1", "--input-data", str(WORK / "data" / "mlp.json"),
            "--measurement-mode", "time_windows", "-s", "999", "--concurrency-range", "16", "--percentile", "99"]
    subprocess.run([*base, "-r", "3", "-p", "1000"], capture_output=True, check=False)
    cpu0, (n0, e0) = thread_cpu(pid), counts(port)
    run = subprocess.run([*base, "-r", "3", "-p", str(int(seconds * 1000))], capture_output=True, text=True,
                         check=False)
    cpu1, (n1, e1) = thread_cpu(pid), counts(port)
    n = max(n1 - n0, 1)
    main = pid
    total = sum(v - cpu0.get(t, 0.0) for t, v in cpu1.items())
    throughput = re.findall(r"Throughput: ([\d.]+) infer/sec", run.stdout)
    p99 = re.findall(r"p99 latency: (\d+) usec", run.stdout)
    return {"infer_per_s": float(throughput[-1]) if throughput else float("nan"),  # nan: pa printed none
            "p99_ms": int(p99[-1]) / 1000 if p99 else float("nan"),
            "loop_us": 1e6 * (cpu1.get(main, 0.0) - cpu0.get(main, 0.0)) / n,
            "all_us": 1e6 * total / n, "batch": (n1 - n0) / max(e1 - e0, 1)}


def wait_ready(port: int, proc: subprocess.Popen, limit_s: float = 120.0) -> None:
    """Until GET /v2/models/mlp/ready is 200. Raises RuntimeError when the server exits or times out."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/mlp/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server on {port} not ready in {limit_s} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"))
    ap.add_argument("--servers", default="uvicorn,granian")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--port-base", type=int, default=19520)
    ap.add_argument("--granian-path", default=None, help="a folder holding granian (not a project dependency)")
    ap.add_argument("--granian-threads", type=int, default=1)
    a = ap.parse_args()
    if a.granian_path:
        sys.path.insert(0, a.granian_path)
    if a.serve:
        serve(a.serve[0], int(a.serve[1]), a.granian_threads)
        return
    kinds = a.servers.split(",")
    for kind in kinds:
        if kind not in KINDS:
            raise SystemExit(f"unknown server {kind!r} (one of {', '.join(KINDS)})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    procs: dict[str, tuple[subprocess.Popen, int]] = {}
    try:
        for i, kind in enumerate(kinds):
            port = a.port_base + i
            argv = [sys.executable, __file__, "--serve", kind, str(port), "--granian-threads", str(a.granian_threads)]
            if a.granian_path:
                argv += ["--granian-path", a.granian_path]
            procs[kind] = (subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True), port)
        for proc, port in procs.values():
            wait_ready(port, proc)
        results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        print("| round | server | infer/s | p99 ms | loop thread us/inf | all threads us/inf | batch | load |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for r in range(1, a.rounds + 1):
            for kind in kinds:
                proc, port = procs[kind]
                load = Path("/proc/loadavg").read_text().split()[0]
                m = measure(proc.pid, port, a.seconds)
                results[kind].append(m)
                print(f"| {r} | {kind} | {m['infer_per_s']:.0f} | {m['p99_ms']:.2f} | {m['loop_us']:.1f} | "
                      f"{m['all_us']:.1f} | {m['batch']:.1f} | {load} |", flush=True)
        for kind in kinds:
            med = {k: statistics.median([x[k] for x in results[kind] if x[k] == x[k]] or [float("nan")])
                   for k in results[kind][0]}  # over the rounds that have the figure (x == x: not nan)
            print(f"| median | {kind} | {med['infer_per_s']:.0f} | {med['p99_ms']:.2f} | {med['loop_us']:.1f} | "
                  f"{med['all_us']:.1f} | {med['batch']:.1f} | |")
    finally:
        for proc, _port in procs.values():
            os.killpg(proc.pid, signal.SIGTERM)
        for proc, _port in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
