"""Issue 20 target 5: one ``workbench serve`` with 1, 10, 100 models, measured in one run.

    PYTHONPATH=$PWD .venv/bin/python bench/scale_models.py [--counts 1,10,100] [--rounds 3]
        [--ports 8100] [--interval-ms 2000] [--windows 3] [--scrapes 20] [--starts 3] [--out /tmp/scale_models]
        [--code DIR]

For each count N the script builds ``/tmp/scale_models/repo_N``: ``N - N // 10`` copies of the
sample ``digits_mlp`` (its config with the name changed, both version folders, the ONNX files
linked) and ``N // 10`` ensembles, each running two of those copies side by side on one input
(``pixels`` -> ``logits_a``, ``logits_b``). It then starts one ``workbench serve`` per count
(ports ``--ports + 3 * i`` .. ``+ 2``), one after the other, and measures

* start-up: ``Popen`` -> every row of ``POST /v2/repository/index`` READY (seconds, median of
  ``--starts``);
* memory: RSS of the server process and its children (MiB), after start-up; per model and the
  marginal MiB per added model (against the previous count); the number of threads;
* idle CPU: the server's CPU seconds per wall second while nothing is sent (``--idle-s``);

and then, in ``--rounds`` rounds, each round one hold of ``/tmp/bench.lock`` that measures every
server in turn (so the ratios compare numbers of the same minute): ``GET /metrics`` time (median
of ``--scrapes`` sequential scrapes, ms) and perf_analyzer c=16 batch 1 on ``digits_mlp_000``
(HTTP binary and gRPC; ``--windows`` (>= 3, perf_analyzer needs 3) windows of ``--interval-ms``)
while every other model idles: throughput (infer/s) and p99 (ms). The servers of the other counts
stay up, idle, meanwhile.
Prints a markdown table (medians over rounds, and each figure / the one-model figure) and writes
``results.json`` under ``--out``. A machine-speed probe (numpy copy of 64 MiB, GB/s) is taken in
every round. Timings are not pass/fail; see bench/RESULTS.md "Issue 20: scale".
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "repository" / "digits_mlp"
PERF_ANALYZER = os.environ.get("PERF_ANALYZER", "/tmp/bench_bin/perf_analyzer")
LOCK = "/tmp/bench.lock"
TARGET = "digits_mlp_000"

ENSEMBLE_CONFIG = """name: "{name}"
platform: "ensemble"
max_batch_size: 64
input [ {{ name: "pixels" data_type: TYPE_FP32 dims: [ 64 ] }} ]
output [
  {{ name: "logits_a" data_type: TYPE_FP32 dims: [ 10 ] }},
  {{ name: "logits_b" data_type: TYPE_FP32 dims: [ 10 ] }}
]
ensemble_scheduling {{
  step [
    {{ model_name: "{a}" model_version: -1
      input_map {{ key: "pixels" value: "pixels" }} output_map {{ key: "logits" value: "logits_a" }} }},
    {{ model_name: "{b}" model_version: -1
      input_map {{ key: "pixels" value: "pixels" }} output_map {{ key: "logits" value: "logits_b" }} }}
  ]
}}
"""


def build_repository(directory: Path, count: int) -> list[str]:
    """Write a repository of ``count`` models into ``directory`` (replaced); returns the names."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    ensembles = count // 10
    copies = count - ensembles
    config = (SAMPLE / "config.pbtxt").read_text()
    names = []
    for i in range(copies):
        name = f"digits_mlp_{i:03d}"
        model = directory / name
        model.mkdir()
        (model / "config.pbtxt").write_text(config.replace('name: "digits_mlp"', f'name: "{name}"', 1))
        for version in sorted(p for p in SAMPLE.iterdir() if p.is_dir() and p.name.isdigit()):
            (model / version.name).mkdir()
            (model / version.name / "model.onnx").symlink_to((version / "model.onnx").resolve())
        names.append(name)
    for j in range(ensembles):
        name = f"mlp_pair_{j:02d}"
        (directory / name / "1").mkdir(parents=True)
        a, b = names[(2 * j) % copies], names[(2 * j + 1) % copies]
        (directory / name / "config.pbtxt").write_text(ENSEMBLE_CONFIG.format(name=name, a=a, b=b))
        names.append(name)
    return names


def post_json(url: str, body: dict | None = None, timeout: float = 5.0) -> object:
    """POST ``body`` as JSON, return the decoded answer."""
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def all_ready(http: str, names: list[str]) -> bool:
    """Whether every version row of every name in the repository index is READY."""
    try:
        rows = post_json(f"http://{http}/v2/repository/index")
    except OSError:
        return False
    assert isinstance(rows, list)
    ready = {row["name"] for row in rows if row.get("state") == "READY"}
    not_ready = {row["name"] for row in rows if row.get("state") != "READY"}
    return set(names) <= ready and not not_ready


def tree_rss(process: psutil.Process) -> tuple[int, int]:
    """(RSS bytes of the process and all its children, number of threads of all of them)."""
    rss, threads = 0, 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            rss += p.memory_info().rss
            threads += p.num_threads()
    return rss, threads


def tree_cpu(process: psutil.Process) -> float:
    """CPU seconds (user + system) of the process and its children so far."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = p.cpu_times()
            total += times.user + times.system
    return total


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    """Hold /tmp/bench.lock (the machine's benchmark lock) for the block."""
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def copy_probe() -> float:
    """Machine-speed probe: GB/s of a numpy copy of 64 MiB (best of 5)."""
    a = np.ones(64 << 20, np.uint8)
    b = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return (64 << 20) / best / 1e9


class Served:
    """One ``workbench serve`` over one repository (its own process group)."""

    def __init__(self, count: int, repository: Path, port: int, out: Path, code: Path = ROOT) -> None:
        self.count, self.repository, self.code = count, repository, code
        self.http, self.grpc, self.metrics = (f"localhost:{port + k}" for k in range(3))
        self.log = out / f"server_{count}.log"
        self.names = build_repository(repository, count)
        self.process: subprocess.Popen[bytes] | None = None
        self.figures: dict[str, float] = {}

    def start(self, timeout_s: float) -> None:
        """Start the server and wait until every model is READY; records ``startup_s``."""
        executable = Path(sys.executable).with_name("workbench")
        port = int(self.http.rsplit(":", 1)[1])
        command = [str(executable), "serve", f"--model-repository={self.repository}",
                   f"--http-port={port}", f"--grpc-port={port + 1}", f"--metrics-port={port + 2}"]
        env = dict(os.environ, PYTHONPATH=str(self.code))
        started = time.perf_counter()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        while not all_ready(self.http, self.names):
            if self.process.poll() is not None:
                raise RuntimeError(f"server for {self.count} models exited; see {self.log}")
            if time.perf_counter() - started > timeout_s:
                raise RuntimeError(f"server for {self.count} models not ready in {timeout_s} s")
            time.sleep(0.05)
        self.figures["startup_s"] = time.perf_counter() - started

    def settle(self, idle_s: float) -> None:
        """Record RSS, threads and idle CPU (after ``idle_s`` seconds of nothing sent)."""
        assert self.process is not None
        process = psutil.Process(self.process.pid)
        cpu = tree_cpu(process)
        time.sleep(idle_s)
        self.figures["idle_cpu_pct"] = (tree_cpu(process) - cpu) / idle_s * 100
        rss, threads = tree_rss(process)
        self.figures["rss_mib"] = rss / 2**20
        self.figures["threads"] = threads

    def scrape(self, times: int) -> tuple[float, int]:
        """(median ms of ``times`` sequential ``GET /metrics``, bytes of the last answer)."""
        spent, size = [], 0
        for _ in range(times):
            t = time.perf_counter()
            with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=30) as answer:
                size = len(answer.read())
            spent.append((time.perf_counter() - t) * 1000)
        return statistics.median(spent), size

    def perf(self, protocol: str, interval_ms: int, windows: int, out: Path) -> tuple[float, float]:
        """perf_analyzer c=16 on ``digits_mlp_000``: (infer/s, p99 ms)."""
        url = self.http if protocol == "http" else self.grpc
        report = out / f"pa_{self.count}_{protocol}_{time.time_ns()}.csv"
        command = [PERF_ANALYZER, "-m", TARGET, "-u", url, "-i", protocol, "-b", "1",
                   "--concurrency-range", "16", "--percentile", "99",
                   "--measurement-mode", "time_windows", "-s", "999", "-r", str(windows),
                   "-p", str(interval_ms), "-f", str(report)]
        if protocol == "http":
            command += ["--input-tensor-format=binary", "--output-tensor-format=binary"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"perf_analyzer failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        with report.open() as handle:
            row = list(csv.DictReader(handle))[-1]
        return float(row["Inferences/Second"]), float(row["p99 latency"]) / 1000

    def stop(self) -> None:
        """SIGTERM the process group; SIGKILL after 20 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def table(servers: list[Served], rounds: list[dict[int, dict[str, float]]]) -> str:
    """The markdown table: one row per count, medians over rounds, ratios to the first count."""
    keys = ["scrape_ms", "http_infer_s", "http_p99_ms", "grpc_infer_s", "grpc_p99_ms"]
    for server in servers:
        for key in [*keys, "scrape_bytes"]:
            server.figures[key] = statistics.median(r[server.count][key] for r in rounds)
    base = servers[0].figures
    lines = ["| models | start-up s | RSS MiB | RSS MiB / model | marginal MiB / added model | "
             "threads | idle CPU % | /metrics ms (bytes) | HTTP infer/s | HTTP p99 ms | "
             "gRPC infer/s | gRPC p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    previous: Served | None = None
    for server in servers:
        f = server.figures
        marginal = "-"
        if previous is not None:
            marginal = (f"{(f['rss_mib'] - previous.figures['rss_mib']) / (server.count - previous.count):.1f}")

        def ratio(key: str, f: dict[str, float] = f, first: bool = server is servers[0]) -> str:
            return f"{f[key]:.1f}" if first else f"{f[key]:.1f} ({f[key] / base[key]:.2f}x)"

        lines.append(
            f"| {server.count} | {ratio('startup_s')} | {f['rss_mib']:.0f} | "
            f"{f['rss_mib'] / server.count:.1f} | {marginal} | {f['threads']:.0f} | "
            f"{f['idle_cpu_pct']:.1f} | {ratio('scrape_ms')} ({f['scrape_bytes']:.0f}) | "
            f"{ratio('http_infer_s')} | {ratio('http_p99_ms')} | {ratio('grpc_infer_s')} | "
            f"{ratio('grpc_p99_ms')} |")
        previous = server
    return "\n".join(lines)


def main() -> None:
    """Parse the flags, build, start, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,10,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ports", type=int, default=8100)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--starts", type=int, default=3, help="starts per count (median start-up)")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--startup-timeout-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/scale_models"))
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="the checkout whose workbench the servers run (PYTHONPATH; e.g. a git archive "
                             "of an older commit, for a before/after)")
    parser.add_argument("--no-lock", action="store_true", help="do not take /tmp/bench.lock")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    lock = contextlib.nullcontext if args.no_lock else bench_lock
    servers = [Served(n, args.out / f"repo_{n}", args.ports + 3 * i, args.out, args.code)
               for i, n in enumerate(counts)]
    rounds: list[dict[int, dict[str, float]]] = []
    probes = []
    try:
        for server in servers:
            with lock():
                startups = []
                for _ in range(args.starts - 1):  # extra starts, for the median
                    server.start(args.startup_timeout_s)
                    startups.append(server.figures["startup_s"])
                    server.stop()
                server.start(args.startup_timeout_s)
                server.figures["startup_s"] = statistics.median([*startups, server.figures["startup_s"]])
                server.settle(args.idle_s)
                server.perf("http", 300, 3, args.out)  # warm-up, not recorded
                server.perf("grpc", 300, 3, args.out)
            print(f"# {server.count} models: {server.figures}", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            figures: dict[int, dict[str, float]] = {}
            with lock():
                probes.append(copy_probe())
                for server in servers:
                    scrape_ms, scrape_bytes = server.scrape(args.scrapes)
                    http = server.perf("http", args.interval_ms, args.windows, args.out)
                    grpc = server.perf("grpc", args.interval_ms, args.windows, args.out)
                    figures[server.count] = {"scrape_ms": scrape_ms, "scrape_bytes": scrape_bytes,
                                             "http_infer_s": http[0], "http_p99_ms": http[1],
                                             "grpc_infer_s": grpc[0], "grpc_p99_ms": grpc[1]}
            rounds.append(figures)
            print(f"# round {r + 1} (copy probe {probes[-1]:.1f} GB/s): {figures}", file=sys.stderr, flush=True)
    finally:
        for server in servers:
            server.stop()
    print(f"copy probe (numpy, 64 MiB) per round: {', '.join(f'{p:.1f}' for p in probes)} GB/s; "
          f"perf_analyzer c=16 -b 1 on {TARGET}, {args.windows} x {args.interval_ms} ms windows, "
          f"medians of {args.rounds} rounds\n")
    print(table(servers, rounds))
    (args.out / "results.json").write_text(json.dumps(
        {"counts": counts, "probes_gb_s": probes, "rounds": rounds,
         "servers": {s.count: s.figures for s in servers}}, indent=1))


if __name__ == "__main__":
    main()
